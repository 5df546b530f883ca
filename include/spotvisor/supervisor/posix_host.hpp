// The real Host: fork/exec through process::Spawn, SIGCHLD and waitpid for exits (as the
// child subreaper it also reaps the trainer's orphans), kill(2) and /proc for signals and
// groups, the provider's real watcher. io thread only.
#pragma once

#include <memory>

#include "spotvisor/supervisor/host.hpp"

namespace spotvisor::supervisor {

std::unique_ptr<Host> MakePosixHost();

}  // namespace spotvisor::supervisor

// The real Host: the trainer starts through the run's process::ChildTable, whose Reap (on
// SIGCHLD) holds the program's only waitpid(-1) (as the child subreaper it also reaps the
// trainer's orphans; hooks and mirror commands start through the same table), kill(2) and
// /proc for signals and groups, the provider's real watcher. io thread only.
#pragma once

#include <memory>

#include "spotvisor/supervisor/host.hpp"

namespace spotvisor::supervisor {

std::unique_ptr<Host> MakePosixHost();

}  // namespace spotvisor::supervisor

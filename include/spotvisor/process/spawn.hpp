// Starting a child (the trainer, a hook, a mirror command): argv only (never a shell), its
// own process group, PDEATHSIG so it dies with a SIGKILLed supervisor, default signal
// dispositions and an empty signal mask, a working directory and environment. Any thread;
// the program starts children through process::ChildTable, which watches their exit.
#pragma once

#include <sys/types.h>

#include <filesystem>
#include <map>
#include <string>
#include <vector>

#include "spotvisor/util/result.hpp"

namespace spotvisor::process {

struct SpawnSpec {
  std::vector<std::string> argv;           // argv[0] is a path or a name looked up in PATH
  std::filesystem::path workdir;           // must exist
  std::map<std::string, std::string> env;  // added to (and overriding) our environment
  bool pipe_output = false;                // stdout/stderr into pipes (else ours, inherited)
  bool merge_output = false;               // with pipe_output: stderr into the stdout pipe too
  std::filesystem::path output_file;       // without pipe_output: stdout and stderr appended to it
  bool null_stdin = false;                 // stdin from /dev/null (else ours, inherited)
  bool die_with_parent = true;             // PDEATHSIG SIGKILL: gone with a SIGKILLed spotvisor
  bool want_pidfd = false;                 // also a pidfd (SpawnedChild::pidfd)
};

struct SpawnedChild {
  pid_t pid = 0;       // also its process group id
  int stdout_fd = -1;  // with pipe_output: read ends, close-on-exec, owned by the caller
  int stderr_fd = -1;  // -1 with merge_output
  int pidfd = -1;      // with want_pidfd: readable once the child exited (close-on-exec, owned by the caller);
                       // -1 where the kernel has no pidfd_open (before Linux 5.3)
};

// The Error names the command and the reason (exec's errno travels back through a
// close-on-exec pipe).
Result<SpawnedChild> Spawn(const SpawnSpec& spec);

}  // namespace spotvisor::process

// Starting the trainer: argv only (never a shell), its own process group, PDEATHSIG so it
// dies with a SIGKILLed supervisor, default signal dispositions and an empty signal mask,
// the job's working directory and environment. Called on the io thread.
#pragma once

#include <sys/types.h>

#include <filesystem>
#include <map>
#include <string>
#include <vector>

#include "spotvisor/util/result.hpp"

namespace spotvisor::process {

struct SpawnSpec {
  std::vector<std::string> argv;                 // argv[0] is a path or a name looked up in PATH
  std::filesystem::path workdir;                 // must exist
  std::map<std::string, std::string> env;        // added to (and overriding) our environment
  bool pipe_output = false;                      // stdout/stderr into pipes (else ours, inherited)
};

struct SpawnedChild {
  pid_t pid = 0;       // also its process group id
  int stdout_fd = -1;  // with pipe_output: read ends, close-on-exec, owned by the caller
  int stderr_fd = -1;
};

// The Error names the command and the reason (exec's errno travels back through a
// close-on-exec pipe).
Result<SpawnedChild> Spawn(const SpawnSpec& spec);

// argv[0] resolved through PATH the way execvp would; an Error names what was tried.
Result<std::filesystem::path> ResolveExecutable(const std::string& name,
                                                const std::filesystem::path& workdir);

}  // namespace spotvisor::process

// What a command line says, before anything runs: which launcher it starts (torchrun,
// `python -m torch.distributed.run`, accelerate, deepspeed, mpirun) and how many processes
// on this machine, and the program its argv[0] names. Pure functions over the argv (and
// PATH); the job's checks (config/) and the /proc walk to a launcher's workers (process/)
// both read them.
#pragma once

#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include "spotvisor/util/result.hpp"

namespace spotvisor::command {

struct Launcher {
  std::string name;      // "torchrun", "accelerate", "deepspeed", "mpirun"
  std::string evidence;  // what in the argv says so, for people: "argv[0] is torchrun"
  // The processes a launch on this one machine starts, by the launcher's own options:
  // torchrun's --nproc_per_node with --standalone, --nnodes 1 or none; accelerate launch's
  // --num_processes with --num_machines 1 or none. 0 when they do not say (a config file,
  // "auto", several machines, a placeholder such as {nnodes}; DeepSpeed and mpirun).
  int processes = 0;
  std::string processes_evidence;  // "--nproc_per_node 2"
};

// The launcher `argv` runs, if any; through `env NAME=value...` and a Python interpreter
// with its options (`python3 -u -m torch.distributed.run`, `python3 /usr/bin/torchrun`).
std::optional<Launcher> RecognizeLauncher(const std::vector<std::string>& argv);

// argv[0] resolved through PATH the way execvp would; an Error names what was tried.
Result<std::filesystem::path> ResolveExecutable(const std::string& name, const std::filesystem::path& workdir);

}  // namespace spotvisor::command

// Launchers (torchrun, `python -m torch.distributed.run`, accelerate, deepspeed, mpirun)
// and their workers. A launcher dies of SIGUSR1 and kills its workers on its own timetable
// once it gets SIGTERM, so spotvisor signals the workers instead: this file recognizes a
// launcher by its argv and finds its workers in /proc at the moment of a signal (pids
// change when a launcher restarts them). Pure functions and /proc readings; any thread.
#pragma once

#include <sys/types.h>

#include <optional>
#include <string>
#include <vector>

namespace spotvisor::process {

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

// The process tree under a launcher, read once from /proc.
struct LauncherTree {
  std::vector<pid_t> launchers;  // `root` first, then launchers started by launchers (deepspeed -> launch)
  std::vector<pid_t> workers;    // the first non-launcher descendants: the ranks
};

// Walks the live (non-zombie) descendants of `root`: a child that is a launcher is walked
// through, any other child is a worker and its own children (DataLoader workers, a
// compiler) are not listed: the worker owns them. Empty when `root` is gone.
LauncherTree FindWorkers(pid_t root);

// True when `pid` has a handler for `signo` (/proc/<pid>/status SigCgt): a worker that is
// still starting (Python not yet past its imports) would die of a "checkpoint now".
bool CatchesSignal(pid_t pid, int signo);

// The command line of `pid` (/proc/<pid>/cmdline), empty when it is gone or a kernel thread.
std::vector<std::string> CommandLine(pid_t pid);

}  // namespace spotvisor::process

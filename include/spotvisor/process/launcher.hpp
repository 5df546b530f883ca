// Launchers' workers. A launcher dies of SIGUSR1 and kills its workers on its own timetable
// once it gets SIGTERM, so spotvisor signals the workers instead: this file finds them in
// /proc at the moment of a signal (pids change when a launcher restarts them), telling a
// launcher by its command line (command/command_line.hpp). /proc readings; any thread.
#pragma once

#include <sys/types.h>

#include <optional>
#include <string>
#include <vector>

namespace spotvisor::process {

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

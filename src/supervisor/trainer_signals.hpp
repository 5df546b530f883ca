// Private to src/supervisor/: how the Fsm's signals reach one trainer — its process group,
// its main process, or the workers of the launcher it is — and the launchers paused while
// their workers stop. Each call reads /proc afresh (a launcher restarts workers under new
// pids). Owned by the driver; io thread only.
#pragma once

#include <sys/types.h>

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "spotvisor/config/job_config.hpp"
#include "spotvisor/supervisor/host.hpp"

namespace spotvisor::supervisor {

class TrainerSignals {
 public:
  // `leader`: the trainer's main pid, also its process group id.
  explicit TrainerSignals(pid_t leader) : leader_(leader) {}

  // Sends `signo` to `to` (never kAuto); how many processes it reached. With
  // `only_to_handlers`, processes of `to` that do not catch `signo` (SigCgt) are skipped.
  std::size_t Send(int signo, config::SignalTarget to, bool only_to_handlers = false);
  // How many processes of `to` catch `signo` now (a handler installed, not ignored).
  std::size_t Catchers(int signo, config::SignalTarget to) const;
  // SIGKILL to the whole group and to a launcher's workers outside it (torch 2.x starts
  // each in a session of its own); how many processes that was. What each was doing just
  // before is in KilledStates().
  std::size_t KillGroup();
  // "1234 python S futex_wait_queue, 1240 torchrun T do_signal_stop" (for the log).
  const std::string& KilledStates() const { return killed_; }
  // SIGSTOP to the launcher and the launchers under it; how many were paused.
  std::size_t HoldLaunchers();
  // `signo`, then SIGCONT, to every launcher held; how many there were.
  std::size_t ReleaseLaunchers(int signo);
  // SIGSTOP or SIGCONT to the group and a launcher's workers outside it; never to a held launcher.
  std::size_t Pause(bool on);
  // True when the launcher has no live (non-zombie) worker.
  bool WorkersGone() const;
  // What its live workers are doing (Trainer::Workers).
  WorkersActivity Workers() const;
  // The pids the last Send reached, "123,124" (for the log).
  std::string LastPids() const;
  // Processes the last Send left out because they had no handler for the signal.
  std::size_t LastSkipped() const { return skipped_; }

 private:
  // The processes of `to` as /proc shows them now.
  std::vector<pid_t> Targets(config::SignalTarget to) const;

  pid_t leader_;             // main pid and pgid
  std::vector<pid_t> held_;  // launchers paused by HoldLaunchers
  std::vector<pid_t> last_;  // reached by the last Send
  std::size_t skipped_ = 0;  // processes the last Send left out (no handler)
  std::string killed_;       // the group's members as KillGroup found them
};

}  // namespace spotvisor::supervisor

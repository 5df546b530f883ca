// The kill ladder for a process group that is not ours to supervise (the leftover of a
// supervisor that died): which signal on each rung, how long to wait for the group to go,
// when to give up. Pure policy with times as arguments; the caller sends, polls and sleeps.
// Single-threaded.
#pragma once

#include <chrono>
#include <cstddef>
#include <vector>

namespace spotvisor::supervisor {

struct LadderRung {
  int signo = 0;                   // sent to the whole group on this rung
  std::chrono::milliseconds wait;  // then the group has this long to go
};

// A previous supervisor's leftover group: the job's stop signal with the grace window
// capped at 10 s (it has been orphaned a while already), then SIGKILL and kill_timeout.
std::vector<LadderRung> LeftoverLadder(int stop_signal, std::chrono::milliseconds grace,
                                       std::chrono::milliseconds kill_timeout);

class StopLadder {
 public:
  using TimePoint = std::chrono::steady_clock::time_point;
  enum class Move {
    kSignal,   // send `signo` to the group now, then ask again
    kWait,     // poll again no later than `until`
    kStopped,  // the group is gone; `signo` is the last signal sent (0: none was needed)
    kGiveUp,   // the group outlived the last rung
  };
  struct Step {
    Move move = Move::kStopped;
    int signo = 0;
    TimePoint until{};
  };

  explicit StopLadder(std::vector<LadderRung> rungs) : rungs_(std::move(rungs)) {}

  // What to do next, given whether the group is gone now.
  Step Next(bool group_gone, TimePoint now);

 private:
  std::vector<LadderRung> rungs_;  // in order
  std::size_t next_rung_ = 0;      // the rung whose signal goes next
  int last_signo_ = 0;             // sent most recently; 0 = none yet
  TimePoint deadline_{};           // the current rung's wait ends
};

}  // namespace spotvisor::supervisor

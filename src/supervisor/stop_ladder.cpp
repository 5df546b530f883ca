// The kill ladder; see stop_ladder.hpp. Invariant: a rung's signal is sent once, and the
// next rung begins only when the current rung's wait has passed with the group still there.
#include "spotvisor/supervisor/stop_ladder.hpp"

#include <algorithm>
#include <csignal>

namespace spotvisor::supervisor {

std::vector<LadderRung> LeftoverLadder(int stop_signal, std::chrono::milliseconds grace,
                                       std::chrono::milliseconds kill_timeout) {
  const auto term_wait = std::min<std::chrono::milliseconds>(grace, std::chrono::seconds(10));
  return {{stop_signal, term_wait}, {SIGKILL, kill_timeout}};
}

StopLadder::Step StopLadder::Next(bool group_gone, TimePoint now) {
  if (group_gone) return {Move::kStopped, last_signo_, now};
  if (next_rung_ > 0 && now < deadline_) return {Move::kWait, last_signo_, deadline_};
  if (next_rung_ >= rungs_.size()) return {Move::kGiveUp, last_signo_, now};
  const LadderRung& rung = rungs_[next_rung_++];
  last_signo_ = rung.signo;
  deadline_ = now + rung.wait;
  return {Move::kSignal, rung.signo, deadline_};
}

}  // namespace spotvisor::supervisor

// The pulse rule; see pulse.hpp.
#include "spotvisor/health/pulse.hpp"

#include <algorithm>

namespace spotvisor::health {

PulseVerdict JudgePulse(WallTime started, std::optional<WallTime> heartbeat, WallTime now, Duration timeout) {
  const WallTime last = heartbeat && *heartbeat >= started ? *heartbeat : started;
  PulseVerdict v;
  v.silent = std::max(Duration(0), std::chrono::duration_cast<Duration>(now - last));
  v.hung = v.silent >= timeout;
  // A pulse stamped in the future (clock skew on a network filesystem) never makes the
  // next look later than one timeout from now.
  v.check_in = v.hung ? Duration(0) : std::min(timeout, timeout - v.silent);
  return v;
}

}  // namespace spotvisor::health

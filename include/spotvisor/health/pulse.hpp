// Whether a trainer still has a pulse: the heartbeat file's mtime against the trainer's
// start and the hang timeout. A heartbeat older than the start (left by an earlier
// attempt) is no pulse: the hang clock starts when the trainer starts. Pure, any thread.
#pragma once

#include <chrono>
#include <optional>

#include "spotvisor/util/units.hpp"

namespace spotvisor::health {

using WallTime = std::chrono::system_clock::time_point;

struct PulseVerdict {
  bool hung = false;     // no pulse for at least the timeout
  Duration silent{0};    // since the last pulse (or the start)
  Duration check_in{0};  // when not hung: look again after this long
};

// `heartbeat`: the file's mtime, nullopt when it does not exist (yet).
PulseVerdict JudgePulse(WallTime started, std::optional<WallTime> heartbeat, WallTime now, Duration timeout);

}  // namespace spotvisor::health

// A token bucket that caps the mirror's bandwidth (`checkpoints.mirror.bandwidth`), shared
// by every upload thread. The arithmetic is a pure function of time so tests need no
// sleeps; Acquire reads the clock and sleeps the calling worker thread on it (a virtual
// clock moves on by the wait at once). Thread-safe.
#pragma once

#include <cstdint>
#include <mutex>

#include "spotvisor/util/clock.hpp"

namespace spotvisor::mirror {

class RateLimiter {
 public:
  // `bytes_per_second` 0 = unlimited. The bucket holds at most one second's worth and is
  // full at construction. `clock` outlives the limiter.
  RateLimiter(Clock& clock, std::uint64_t bytes_per_second);

  // How long the caller must wait before sending `bytes` at `now`; takes them from the
  // bucket (the debt is paid by the wait).
  Duration Reserve(std::uint64_t bytes, SteadyTime now);
  // Reserve at the clock's now, then sleep that long on it.
  void Acquire(std::uint64_t bytes);

  std::uint64_t rate() const { return rate_; }

 private:
  Clock& clock_;              // not owned
  const std::uint64_t rate_;  // bytes per second; 0 = unlimited
  std::mutex mutex_;          // guards the two below
  double tokens_;             // bytes that may go now (negative: debt)
  SteadyTime refilled_at_;    // when tokens_ was last brought up to date
};

}  // namespace spotvisor::mirror

// A token bucket that caps the mirror's bandwidth (`checkpoints.mirror.bandwidth`), shared
// by every upload thread. The arithmetic is a pure function of time so tests need no
// sleeps; Acquire sleeps the calling worker thread. Thread-safe.
#pragma once

#include <chrono>
#include <cstdint>
#include <mutex>

namespace spotvisor::mirror {

class RateLimiter {
 public:
  using Clock = std::chrono::steady_clock;

  // `bytes_per_second` 0 = unlimited. The bucket holds at most one second's worth.
  explicit RateLimiter(std::uint64_t bytes_per_second);

  // How long the caller must wait before sending `bytes` at `now`; takes them from the
  // bucket (the debt is paid by the wait).
  Clock::duration Reserve(std::uint64_t bytes, Clock::time_point now);
  // Reserve, then sleep that long.
  void Acquire(std::uint64_t bytes);

  std::uint64_t rate() const { return rate_; }

 private:
  const std::uint64_t rate_;       // bytes per second; 0 = unlimited
  std::mutex mutex_;               // guards the two below
  double tokens_;                  // bytes that may go now (negative: debt)
  Clock::time_point refilled_at_;  // when tokens_ was last brought up to date
};

}  // namespace spotvisor::mirror

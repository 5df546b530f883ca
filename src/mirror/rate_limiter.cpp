// The mirror's token bucket; see rate_limiter.hpp.
#include "spotvisor/mirror/rate_limiter.hpp"

#include <algorithm>
#include <thread>

namespace spotvisor::mirror {

RateLimiter::RateLimiter(std::uint64_t bytes_per_second)
    : rate_(bytes_per_second), tokens_(static_cast<double>(bytes_per_second)), refilled_at_(Clock::now()) {}

RateLimiter::Clock::duration RateLimiter::Reserve(std::uint64_t bytes, Clock::time_point now) {
  if (rate_ == 0) return Clock::duration::zero();
  std::lock_guard lock(mutex_);
  const double rate = static_cast<double>(rate_);
  if (now > refilled_at_) {
    const double elapsed = std::chrono::duration<double>(now - refilled_at_).count();
    tokens_ = std::min(rate, tokens_ + elapsed * rate);
    refilled_at_ = now;
  }
  tokens_ -= static_cast<double>(bytes);
  if (tokens_ >= 0) return Clock::duration::zero();
  return std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(-tokens_ / rate));
}

void RateLimiter::Acquire(std::uint64_t bytes) {
  const auto wait = Reserve(bytes, Clock::now());
  if (wait > Clock::duration::zero()) std::this_thread::sleep_for(wait);
}

}  // namespace spotvisor::mirror

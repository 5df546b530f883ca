// The mirror's token bucket; see rate_limiter.hpp.
#include "spotvisor/mirror/rate_limiter.hpp"

#include <algorithm>
#include <cmath>

namespace spotvisor::mirror {

RateLimiter::RateLimiter(Clock& clock, std::uint64_t bytes_per_second)
    : clock_(clock),
      rate_(bytes_per_second),
      tokens_(static_cast<double>(bytes_per_second)),
      refilled_at_(clock.Now()) {}

Duration RateLimiter::Reserve(std::uint64_t bytes, SteadyTime now) {
  if (rate_ == 0) return Duration::zero();
  std::lock_guard lock(mutex_);
  const double rate = static_cast<double>(rate_);
  if (now > refilled_at_) {
    const double elapsed = std::chrono::duration<double>(now - refilled_at_).count();
    tokens_ = std::min(rate, tokens_ + elapsed * rate);
    refilled_at_ = now;
  }
  tokens_ -= static_cast<double>(bytes);
  if (tokens_ >= 0) return Duration::zero();
  // Rounded up: a wait never ends before the debt is paid.
  return Duration(static_cast<Duration::rep>(std::ceil(-tokens_ * 1000.0 / rate)));
}

void RateLimiter::Acquire(std::uint64_t bytes) {
  const auto wait = Reserve(bytes, clock_.Now());
  if (wait > Duration::zero()) clock_.Sleep(wait);
}

}  // namespace spotvisor::mirror

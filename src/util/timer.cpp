// steady_timer behind Timer. A generation counter makes a cancelled wait whose handler is
// already queued a no-op.
#include "spotvisor/util/timer.hpp"

#include <boost/asio/io_context.hpp>
#include <boost/asio/steady_timer.hpp>

namespace spotvisor {

struct Timer::Impl {
  explicit Impl(boost::asio::io_context& io) : timer(io) {}
  boost::asio::steady_timer timer;  // the Asio timer
  std::function<void()> fn;         // what runs on expiry; empty when none is pending
  std::uint64_t generation = 0;     // bumped by every After and Cancel
};

Timer::Timer(boost::asio::io_context& io) : impl_(std::make_shared<Impl>(io)) {}

Timer::~Timer() { Cancel(); }

void Timer::After(Duration delay, std::function<void()> fn) {
  const std::uint64_t generation = ++impl_->generation;
  impl_->fn = std::move(fn);
  impl_->timer.expires_after(delay);
  impl_->timer.async_wait([impl = impl_, generation](const boost::system::error_code& ec) {
    if (ec || generation != impl->generation || !impl->fn) return;
    auto run = std::move(impl->fn);
    impl->fn = nullptr;
    run();
  });
}

void Timer::Cancel() {
  ++impl_->generation;
  impl_->fn = nullptr;
  impl_->timer.cancel();
}

bool Timer::Pending() const { return static_cast<bool>(impl_->fn); }

}  // namespace spotvisor

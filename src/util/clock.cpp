// The real Clock: std::chrono's clocks and Asio's steady_timer. A generation counter makes a
// cancelled wait whose handler is already queued a no-op.
#include "spotvisor/util/clock.hpp"

#include <boost/asio/io_context.hpp>
#include <boost/asio/steady_timer.hpp>
#include <thread>

namespace spotvisor {
namespace {

class AsioTimer final : public Timer {
 public:
  explicit AsioTimer(boost::asio::io_context& io) : state_(std::make_shared<State>(io)) {}
  ~AsioTimer() override { Cancel(); }

  void After(Duration delay, std::function<void()> fn) override {
    state_->timer.expires_after(delay);
    Wait(std::move(fn));
  }
  void At(SteadyTime when, std::function<void()> fn) override {
    state_->timer.expires_at(when);
    Wait(std::move(fn));
  }
  void Cancel() override {
    ++state_->generation;
    state_->fn = nullptr;
    state_->timer.cancel();
  }
  bool Pending() const override { return static_cast<bool>(state_->fn); }

 private:
  struct State {
    explicit State(boost::asio::io_context& io) : timer(io) {}
    boost::asio::steady_timer timer;  // the Asio timer
    std::function<void()> fn;         // what runs on expiry; empty when none is pending
    std::uint64_t generation = 0;     // bumped by every wait and Cancel
  };

  void Wait(std::function<void()> fn) {
    const std::uint64_t generation = ++state_->generation;
    state_->fn = std::move(fn);
    state_->timer.async_wait([state = state_, generation](const boost::system::error_code& ec) {
      if (ec || generation != state->generation || !state->fn) return;
      auto run = std::move(state->fn);
      state->fn = nullptr;
      run();
    });
  }

  std::shared_ptr<State> state_;  // shared with the pending wait's handler
};

class RealClock final : public Clock {
 public:
  SteadyTime Now() const override { return std::chrono::steady_clock::now(); }
  WallTime WallNow() const override { return std::chrono::system_clock::now(); }
  std::unique_ptr<Timer> MakeTimer(boost::asio::io_context& io) override { return std::make_unique<AsioTimer>(io); }
  void Sleep(Duration d) override { std::this_thread::sleep_for(d); }
  void Run(boost::asio::io_context& io) override { io.run(); }
  std::shared_ptr<void> BackgroundWork() override { return nullptr; }
};

}  // namespace

Clock& SystemClock() {
  static RealClock clock;  // stateless; never destroyed before its users
  return clock;
}

}  // namespace spotvisor

// A Clock (spotvisor/util/clock.hpp) whose time moves only when its loop has nothing to do:
// Run(io) runs every ready handler, waits while BackgroundWork is in flight, and then jumps
// to the earliest pending timer and runs it. Ninety seconds of grace pass in microseconds,
// and a test reads the time anything happened at from Now() or elapsed(). Steady time
// starts at an arbitrary fixed point, wall time at `wall_start`. One loop at a time; Now,
// WallNow, Sleep and BackgroundWork from any thread.
#pragma once

#include <atomic>
#include <chrono>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>

#include "spotvisor/util/clock.hpp"

namespace spotvisor::testing {

class VirtualClock final : public Clock {
 public:
  explicit VirtualClock(WallTime wall_start = std::chrono::system_clock::now());

  SteadyTime Now() const override;
  WallTime WallNow() const override;
  std::unique_ptr<Timer> MakeTimer(boost::asio::io_context& io) override;
  void Sleep(Duration d) override;  // moves time on by `d`, at once
  void Run(boost::asio::io_context& io) override;
  std::shared_ptr<void> BackgroundWork() override;

  // Runs `io` as Run does for `d` of virtual time: every handler and every timer due by then
  // (the time each is due at), then sets the time to the end. Returns without waiting for
  // real work (a socket, a child process) when no timer is due in that span.
  void RunFor(boost::asio::io_context& io, Duration d);

  // Virtual time since the clock was made.
  Duration elapsed() const;
  // How many timers are waiting.
  std::size_t pending_timers() const;

  struct State;  // shared with the timers, which may outlive the clock

 private:
  void Loop(boost::asio::io_context& io, std::optional<SteadyTime> until);

  std::shared_ptr<State> state_;
};

}  // namespace spotvisor::testing

// Time behind one seam (leveldb's Env): the steady clock every deadline is measured on, the
// wall clock that people and files read, one-shot timers, and the loop that runs them.
// SystemClock() is the real one. Tests use a virtual clock (tests/support/virtual_clock.hpp)
// whose time moves only when its loop has nothing else to do, so that "90 s of grace, then
// SIGKILL" runs in microseconds. Whoever measures or waits takes a Clock& from its owner (the
// driver's Host, RunControl for observers) and reads no std::chrono clock itself.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>

#include "spotvisor/util/units.hpp"

namespace boost::asio {
class io_context;
}  // namespace boost::asio

namespace spotvisor {

using SteadyTime = std::chrono::steady_clock::time_point;
using WallTime = std::chrono::system_clock::time_point;

// A one-shot timer on the io_context thread that made it. Cancel() or destruction drops the
// pending callback: it never runs afterwards.
class Timer {
 public:
  virtual ~Timer() = default;
  // Runs `fn` once after `delay` (0 = soon, from the event loop); replaces a pending one.
  virtual void After(Duration delay, std::function<void()> fn) = 0;
  // The same at a point of the clock's steady time (at once when it has passed).
  virtual void At(SteadyTime when, std::function<void()> fn) = 0;
  virtual void Cancel() = 0;
  virtual bool Pending() const = 0;
};

class Clock {
 public:
  virtual ~Clock() = default;
  virtual SteadyTime Now() const = 0;
  virtual WallTime WallNow() const = 0;
  // A timer on `io` that runs in this clock's time.
  virtual std::unique_ptr<Timer> MakeTimer(boost::asio::io_context& io) = 0;
  // Blocks the calling thread for `d` of this clock's time.
  virtual void Sleep(Duration d) = 0;
  // Runs `io` until it has no work left (io.run() for the real clock).
  virtual void Run(boost::asio::io_context& io) = 0;
  // Work on another thread that will post its result back to the loop: a virtual clock does
  // not move while such a token lives (release it after the post). The real clock hands out
  // an empty one.
  virtual std::shared_ptr<void> BackgroundWork() = 0;
};

// The machine's clocks and Asio's timers. Any thread.
Clock& SystemClock();

// A wall time as Unix milliseconds (the journal's unit).
inline std::int64_t UnixMillis(WallTime t) {
  return std::chrono::duration_cast<std::chrono::milliseconds>(t.time_since_epoch()).count();
}

}  // namespace spotvisor

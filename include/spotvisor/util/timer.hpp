// A one-shot timer that keeps Asio out of its users' translation units (the watchers, etcd). Runs
// on the io_context thread that created it. Cancel() or destruction drops the pending
// callback: it never runs afterwards.
#pragma once

#include <functional>
#include <memory>

#include "spotvisor/util/units.hpp"

namespace boost::asio {
class io_context;
}  // namespace boost::asio

namespace spotvisor {

class Timer {
 public:
  explicit Timer(boost::asio::io_context& io);
  ~Timer();
  Timer(const Timer&) = delete;
  Timer& operator=(const Timer&) = delete;

  // Runs `fn` once after `delay` (0 = soon, from the event loop); replaces a pending one.
  void After(Duration delay, std::function<void()> fn);
  void Cancel();
  bool Pending() const;

 private:
  struct Impl;
  std::shared_ptr<Impl> impl_;  // shared with the pending wait's handler
};

}  // namespace spotvisor

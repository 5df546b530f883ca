// What systemd hears from a run (Type=notify): READY once the first trainer started, a
// STATUS line per change, STOPPING at the end, EXTEND_TIMEOUT_USEC while a stop may take
// the whole grace, and WATCHDOG=1 from a timer at a quarter of WatchdogSec. Nothing when
// not run by systemd. The watchdog is a timer of the run's clock. io thread only.
#pragma once

#include <boost/asio/io_context.hpp>
#include <memory>
#include <optional>
#include <string>

#include "spotvisor/telemetry/sd_notify.hpp"
#include "spotvisor/util/clock.hpp"

namespace spotvisor::telemetry {

class SystemdStatus {
 public:
  explicit SystemdStatus(std::optional<SdNotifier> notifier) : notifier_(std::move(notifier)) {}

  // Starts petting the watchdog when systemd asked for it, on a timer of `clock`.
  void StartWatchdog(boost::asio::io_context& io, Clock& clock);
  void StopWatchdog() { watchdog_.reset(); }

  // Sends one message; a failure is logged once, not per message. False when not sent.
  bool Notify(const std::string& message);
  // READY=1, at most once per process.
  void Ready();

 private:
  void Pet();

  std::optional<SdNotifier> notifier_;  // run by systemd
  std::unique_ptr<Timer> watchdog_;     // pets WATCHDOG=1
  bool ready_sent_ = false;
  bool failed_ = false;  // said once
};

}  // namespace spotvisor::telemetry

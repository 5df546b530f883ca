// sd_notify during a run; see systemd_status.hpp.
#include "systemd_status.hpp"

#include "spotvisor/log/log.hpp"

namespace spotvisor::telemetry {

using log::Log;
using log::LogLevel;
using log::Quote;

void SystemdStatus::StartWatchdog(boost::asio::io_context& io, Clock& clock) {
  if (!notifier_ || !notifier_->watchdog_interval()) return;
  watchdog_ = clock.MakeTimer(io);
  Notify("WATCHDOG=1");
  Pet();
}

void SystemdStatus::Pet() {
  watchdog_->After(*notifier_->watchdog_interval(), [this] {
    Notify("WATCHDOG=1");
    Pet();
  });
}

bool SystemdStatus::Notify(const std::string& message) {
  if (!notifier_) return false;
  const bool sent = notifier_->Send(message);
  if (!sent && !failed_) {
    failed_ = true;
    Log(LogLevel::kWarning, "event=sd_notify_failed socket=" + Quote(notifier_->socket()));
  }
  return sent;
}

void SystemdStatus::Ready() {
  if (!ready_sent_) ready_sent_ = Notify("READY=1");
}

}  // namespace spotvisor::telemetry

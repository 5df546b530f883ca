// The systemd notification protocol, spoken directly: one datagram per message to the
// unix socket named by $NOTIFY_SOCKET (a path, or '@' for the abstract namespace). No
// libsystemd: the protocol is one sendto(), and the library would be our only link to it.
// Not thread-safe; used from the io thread.
#pragma once

#include <optional>
#include <string>
#include <string_view>

#include "spotvisor/util/units.hpp"

namespace spotvisor::telemetry {

class SdNotifier {
 public:
  // Reads NOTIFY_SOCKET, WATCHDOG_USEC and WATCHDOG_PID and removes them from the
  // environment, so that the trainer never talks to systemd in our name. nullopt when
  // not run by systemd (no NOTIFY_SOCKET).
  static std::optional<SdNotifier> FromEnvironment();
  // For tests and explicit use: `socket` as NOTIFY_SOCKET spells it.
  explicit SdNotifier(std::string socket, std::optional<Duration> watchdog = std::nullopt);

  // Sends "READY=1", "STATUS=...", "WATCHDOG=1", "STOPPING=1" (newline-separated lines
  // allowed). False when the datagram could not be sent (logged once by the caller).
  bool Send(std::string_view message) const;

  // A quarter of WATCHDOG_USEC (systemd's advice is half; a quarter leaves margin for a
  // busy machine), when the watchdog is on and meant for this process.
  std::optional<Duration> watchdog_interval() const { return watchdog_interval_; }
  const std::string& socket() const { return socket_; }

 private:
  std::string socket_;                         // as in NOTIFY_SOCKET
  std::optional<Duration> watchdog_interval_;  // pet this often
};

}  // namespace spotvisor::telemetry

// sd_notify(3) without libsystemd; see sd_notify.hpp.
#include "spotvisor/telemetry/sd_notify.hpp"

#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cstddef>
#include <cstdlib>
#include <cstring>

namespace spotvisor::telemetry {

std::optional<SdNotifier> SdNotifier::FromEnvironment() {
  const char* socket = std::getenv("NOTIFY_SOCKET");
  const char* usec = std::getenv("WATCHDOG_USEC");
  const char* wpid = std::getenv("WATCHDOG_PID");
  std::optional<Duration> watchdog;
  if (usec != nullptr) {
    char* end = nullptr;
    const unsigned long long us = std::strtoull(usec, &end, 10);
    const bool for_us = wpid == nullptr || std::strtol(wpid, nullptr, 10) == static_cast<long>(getpid());
    if (end != usec && *end == '\0' && us > 0 && for_us) {
      watchdog = std::chrono::duration_cast<Duration>(std::chrono::microseconds(us / 4));
      if (watchdog->count() <= 0) watchdog = Duration(1);
    }
  }
  std::optional<SdNotifier> out;
  if (socket != nullptr && *socket != '\0') out.emplace(std::string(socket), watchdog);
  unsetenv("NOTIFY_SOCKET");
  unsetenv("WATCHDOG_USEC");
  unsetenv("WATCHDOG_PID");
  return out;
}

SdNotifier::SdNotifier(std::string socket, std::optional<Duration> watchdog)
    : socket_(std::move(socket)), watchdog_interval_(watchdog) {}

bool SdNotifier::Send(std::string_view message) const {
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  if (socket_.empty() || socket_.size() >= sizeof addr.sun_path) return false;
  if (socket_[0] != '/' && socket_[0] != '@') return false;  // vsock and friends: not supported
  std::memcpy(addr.sun_path, socket_.data(), socket_.size());
  if (socket_[0] == '@') addr.sun_path[0] = '\0';  // abstract namespace
  const auto len =
      static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + socket_.size() + (socket_[0] == '@' ? 0 : 1));
  const int fd = ::socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return false;
  const ssize_t n = sendto(fd, message.data(), message.size(), MSG_NOSIGNAL, reinterpret_cast<sockaddr*>(&addr), len);
  close(fd);
  return n == static_cast<ssize_t>(message.size());
}

}  // namespace spotvisor::telemetry

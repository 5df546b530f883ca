// This machine's names (see host_name.hpp).
#include "spotvisor/util/host_name.hpp"

#include <netdb.h>
#include <sys/socket.h>
#include <unistd.h>

#include <array>

namespace spotvisor::util {

std::string ShortHostName() {
  std::array<char, 256> host{};
  if (gethostname(host.data(), host.size() - 1) != 0) return "";
  return host.data();
}

std::string CanonicalHostName() {
  const std::string name = ShortHostName();
  if (name.empty()) return name;
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_CANONNAME;
  addrinfo* found = nullptr;
  if (getaddrinfo(name.c_str(), nullptr, &hints, &found) != 0 || found == nullptr) return name;
  std::string canonical = found->ai_canonname != nullptr ? found->ai_canonname : "";
  freeaddrinfo(found);
  return canonical.empty() ? name : canonical;
}

}  // namespace spotvisor::util

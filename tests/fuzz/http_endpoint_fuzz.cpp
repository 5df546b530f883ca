// libFuzzer target: base URL parsing (provider.endpoint and the like; coordination.etcd with
// https) never crashes, an accepted endpoint has a host and a non-zero port, and https is
// accepted only where the caller takes it.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include "spotvisor/http/endpoint.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  const auto endpoint = spotvisor::http::ParseEndpoint(text, "provider.endpoint");
  if (endpoint && (endpoint->host.empty() || endpoint->port == 0 || endpoint->tls)) std::abort();
  using spotvisor::http::Schemes;
  const auto either = spotvisor::http::ParseEndpoint(text, "coordination.etcd", {}, Schemes::kHttpOrHttps);
  if (either && (either->host.empty() || either->port == 0)) std::abort();
  if (either && either->tls != (either->url.rfind("https://", 0) == 0)) std::abort();
  if (endpoint && !either) std::abort();  // accepting https too never refuses an http URL
  return 0;
}

// libFuzzer target: base URL parsing (provider.endpoint and the like) never crashes and an
// accepted endpoint has a host and a non-zero port.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include "spotvisor/http/endpoint.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  const auto endpoint = spotvisor::http::ParseEndpoint(text, "provider.endpoint");
  if (endpoint && (endpoint->host.empty() || endpoint->port == 0)) std::abort();
  return 0;
}

// A metadata endpoint's base URL (`provider.endpoint`, `scheme://host:port`) split into
// what a connection needs. Plain HTTP only: metadata services do not speak TLS. Pure.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "spotvisor/config/job_config.hpp"
#include "spotvisor/util/result.hpp"

namespace spotvisor::preemption {

struct Endpoint {
  std::string host;         // name or address, without brackets ("::1", "169.254.169.254")
  std::uint16_t port = 80;  // TCP port
  std::string host_header;  // the Host header value ("127.0.0.1:1338", "[::1]:80" -> "[::1]")
  std::string url;          // "http://host:port", for logs
};

// "http://127.0.0.1:1338", "http://[::1]:8080/", "http://metadata.google.internal".
Result<Endpoint> ParseEndpoint(std::string_view url);

// The provider's own metadata address (link-local: no DNS, no proxy), used when
// provider.endpoint is not set. GCP's also answers as metadata.google.internal.
const char* DefaultEndpoint(config::ProviderKind kind);

}  // namespace spotvisor::preemption

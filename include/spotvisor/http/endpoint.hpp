// A base URL from the config (`scheme://host:port`) split into what a connection needs.
// Plain HTTP unless the caller accepts https too. Every error names the caller's config key
// and the URL. Pure.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "spotvisor/util/result.hpp"

namespace spotvisor::http {

struct Endpoint {
  std::string host;         // name or address, without brackets ("::1", "169.254.169.254")
  std::uint16_t port = 80;  // TCP port
  std::string host_header;  // the Host header value ("127.0.0.1:1338", "[::1]:80" -> "[::1]")
  std::string url;          // "http://host:port" or "https://host:port", for logs
  bool tls = false;         // https: TLS over the TCP connection (see stream.hpp)
};

// Which schemes a caller accepts.
enum class Schemes { kHttp, kHttpOrHttps };

// The two refusals whose reason depends on who listens at the URL, in the caller's words.
struct EndpointWords {
  std::string_view https = "plain http only, not https";         // why an https URL is refused
  std::string_view path = "the paths are appended per request";  // why a path is refused
};

// "http://127.0.0.1:1338", "http://[::1]:8080/", "http://metadata.google.internal", and with
// kHttpOrHttps "https://etcd.example:2379" (port 443 unless given). Refuses https (unless
// accepted), paths, user info and bad ports; every message reads "<key> '<url>': <why>",
// where `key` is the config key the URL came from.
Result<Endpoint> ParseEndpoint(std::string_view url, std::string_view key, const EndpointWords& words = {},
                               Schemes schemes = Schemes::kHttp);

}  // namespace spotvisor::http

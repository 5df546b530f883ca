// Splits a base URL into host and port and refuses what the client cannot use (https where
// the caller takes plain http only, paths, user info, bad ports), naming the caller's config
// key and the URL in the message.
#include "spotvisor/http/endpoint.hpp"

#include <cctype>

namespace spotvisor::http {
namespace {

Error Bad(std::string_view key, std::string_view url, std::string_view why) {
  return Error{std::string(key) + " '" + std::string(url.substr(0, 200)) + "': " + std::string(why)};
}

bool ValidHostChar(char c) { return std::isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '.' || c == '_'; }

}  // namespace

Result<Endpoint> ParseEndpoint(std::string_view url, std::string_view key, const EndpointWords& words,
                               Schemes schemes) {
  const bool https = url.rfind("https://", 0) == 0;
  if (https && schemes == Schemes::kHttp) return Bad(key, url, words.https);
  if (!https && url.rfind("http://", 0) != 0) {
    return Bad(key, url, schemes == Schemes::kHttp ? "expected http://host:port" : "expected http(s)://host:port");
  }
  std::string_view rest = url.substr(https ? 8 : 7);
  if (!rest.empty() && rest.back() == '/') rest.remove_suffix(1);
  if (rest.find_first_of("/?#@") != std::string_view::npos) {
    return Bad(key, url, "expected only scheme://host:port (" + std::string(words.path) + ")");
  }
  Endpoint ep;
  ep.tls = https;
  ep.port = https ? 443 : 80;
  bool has_port = false;       // a ':' followed the host
  std::string_view port_text;  // what followed it
  if (!rest.empty() && rest.front() == '[') {
    const auto close = rest.find(']');
    if (close == std::string_view::npos) return Bad(key, url, "unterminated [IPv6] address");
    ep.host = std::string(rest.substr(1, close - 1));
    const std::string_view after = rest.substr(close + 1);
    if (!after.empty()) {
      if (after.front() != ':') return Bad(key, url, "expected :port after the address");
      has_port = true;
      port_text = after.substr(1);
    }
    for (const char c : ep.host) {
      if (!std::isxdigit(static_cast<unsigned char>(c)) && c != ':' && c != '.') {
        return Bad(key, url, "bad IPv6 address");
      }
    }
  } else {
    const auto colon = rest.find(':');
    ep.host = std::string(rest.substr(0, colon));
    if (colon != std::string_view::npos) {
      has_port = true;
      port_text = rest.substr(colon + 1);
    }
    for (const char c : ep.host) {
      if (!ValidHostChar(c)) return Bad(key, url, "bad host name");
    }
  }
  if (ep.host.empty()) return Bad(key, url, "no host");
  if (has_port) {
    if (port_text.empty()) return Bad(key, url, "empty port");
    unsigned long port = 0;
    for (const char c : port_text) {
      if (!std::isdigit(static_cast<unsigned char>(c)) || port > 65535) return Bad(key, url, "bad port");
      port = port * 10 + static_cast<unsigned long>(c - '0');
    }
    if (port == 0 || port > 65535) return Bad(key, url, "port out of range");
    ep.port = static_cast<std::uint16_t>(port);
  }
  const std::string shown = ep.host.find(':') != std::string::npos ? "[" + ep.host + "]" : ep.host;
  ep.host_header = ep.port == (https ? 443 : 80) ? shown : shown + ":" + std::to_string(ep.port);
  ep.url = (https ? "https://" : "http://") + shown + ":" + std::to_string(ep.port);
  return ep;
}

}  // namespace spotvisor::http

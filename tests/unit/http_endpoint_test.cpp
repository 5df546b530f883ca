// Base URL parsing for the HTTP client: what is accepted, what is refused, and that every
// message names the caller's config key and the URL.
#include <gtest/gtest.h>

#include "spotvisor/http/endpoint.hpp"

namespace spotvisor::http {
namespace {

TEST(HttpEndpointTest, Parses) {
  auto a = ParseEndpoint("http://127.0.0.1:1338", "provider.endpoint");
  ASSERT_TRUE(a.ok());
  EXPECT_EQ(a->host, "127.0.0.1");
  EXPECT_EQ(a->port, 1338);
  EXPECT_EQ(a->host_header, "127.0.0.1:1338");
  EXPECT_EQ(a->url, "http://127.0.0.1:1338");
  auto b = ParseEndpoint("http://169.254.169.254/", "provider.endpoint");
  ASSERT_TRUE(b.ok());
  EXPECT_EQ(b->port, 80);
  EXPECT_EQ(b->host_header, "169.254.169.254");
  auto c = ParseEndpoint("http://[::1]:8080", "provider.endpoint");
  ASSERT_TRUE(c.ok());
  EXPECT_EQ(c->host, "::1");
  EXPECT_EQ(c->host_header, "[::1]:8080");
  EXPECT_TRUE(ParseEndpoint("http://metadata.google.internal", "provider.endpoint").ok());
}

TEST(HttpEndpointTest, HttpsWhereTheCallerTakesIt) {
  auto a = ParseEndpoint("https://etcd-0.example:2379", "coordination.etcd", {}, Schemes::kHttpOrHttps);
  ASSERT_TRUE(a.ok()) << a.error().message;
  EXPECT_TRUE(a->tls);
  EXPECT_EQ(a->host, "etcd-0.example");
  EXPECT_EQ(a->port, 2379);
  EXPECT_EQ(a->host_header, "etcd-0.example:2379");
  EXPECT_EQ(a->url, "https://etcd-0.example:2379");
  auto b = ParseEndpoint("https://[::1]/", "coordination.etcd", {}, Schemes::kHttpOrHttps);
  ASSERT_TRUE(b.ok()) << b.error().message;
  EXPECT_EQ(b->port, 443);
  EXPECT_EQ(b->host_header, "[::1]");
  EXPECT_EQ(b->url, "https://[::1]:443");
  auto c = ParseEndpoint("http://10.0.0.5:2379", "coordination.etcd", {}, Schemes::kHttpOrHttps);
  ASSERT_TRUE(c.ok());
  EXPECT_FALSE(c->tls);
  EXPECT_EQ(ParseEndpoint("ftp://x", "coordination.etcd", {}, Schemes::kHttpOrHttps).error().message,
            "coordination.etcd 'ftp://x': expected http(s)://host:port");
  EXPECT_FALSE(ParseEndpoint("https://x:2379/v3", "coordination.etcd", {}, Schemes::kHttpOrHttps).ok());
  EXPECT_FALSE(ParseEndpoint("https://", "coordination.etcd", {}, Schemes::kHttpOrHttps).ok());
}

TEST(HttpEndpointTest, Refuses) {
  for (const char* bad : {"", "127.0.0.1:1338", "https://169.254.169.254", "http://", "http://:80", "http://host:0",
                          "http://host:65536", "http://host:", "http://host:8x", "http://host/latest",
                          "http://user@host", "http://[::1", "http://ho st", "http://host:99999999999999999999"}) {
    EXPECT_FALSE(ParseEndpoint(bad, "provider.endpoint").ok()) << bad;
  }
}

TEST(HttpEndpointTest, ErrorsNameTheCallersKeyAndWords) {
  EXPECT_EQ(ParseEndpoint("http://host:0", "coordination.endpoint").error().message,
            "coordination.endpoint 'http://host:0': port out of range");
  EXPECT_EQ(ParseEndpoint("https://x", "coordination.endpoint").error().message,
            "coordination.endpoint 'https://x': plain http only, not https");
  EXPECT_EQ(ParseEndpoint("http://x/v3", "coordination.endpoint").error().message,
            "coordination.endpoint 'http://x/v3': expected only scheme://host:port (the paths are appended per "
            "request)");
  const EndpointWords words{.https = "no TLS yet", .path = "give the base URL"};
  EXPECT_EQ(ParseEndpoint("https://x", "k", words).error().message, "k 'https://x': no TLS yet");
  EXPECT_EQ(ParseEndpoint("http://x/v3", "k", words).error().message,
            "k 'http://x/v3': expected only scheme://host:port (give the base URL)");
}

}  // namespace
}  // namespace spotvisor::http

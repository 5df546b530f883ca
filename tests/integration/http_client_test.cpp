// The HTTP client on its own: error kinds, deadline over the whole exchange,
// body and header limits, connection reuse, transparent resend when a kept-alive
// connection was closed by the peer, Cancel() dropping the handler, and what it never sends.
#include "spotvisor/http/http_client.hpp"

#include <gtest/gtest.h>

#include <boost/asio/io_context.hpp>
#include <cstdlib>

#include "integration/preemption_test_util.hpp"

namespace spotvisor {
namespace {

using namespace std::chrono_literals;
using http::HttpClient;
using http::HttpErrorKind;
using http::HttpOutcome;
using http::HttpRequest;
using testing::HttpAnswer;
using testing::RawAction;
using testing::RawServer;
using testing::RunUntil;

http::Endpoint At(std::uint16_t port) {
  auto ep = http::ParseEndpoint("http://127.0.0.1:" + std::to_string(port), "endpoint");
  EXPECT_TRUE(ep.ok());
  return *ep;
}

// Sends one request and runs the loop until it completes.
HttpOutcome Exchange(boost::asio::io_context& io, HttpClient& client, HttpRequest request) {
  std::optional<HttpOutcome> result;
  client.Send(std::move(request), [&](HttpOutcome o) { result = std::move(o); });
  EXPECT_TRUE(RunUntil(
      io, [&] { return result.has_value(); }, 5s));
  return result.value_or(HttpOutcome{HttpErrorKind::kNetwork, "no answer", {}});
}

HttpRequest Get(std::string target, std::chrono::milliseconds timeout = 300ms) {
  HttpRequest r;
  r.target = std::move(target);
  r.timeout = timeout;
  return r;
}

TEST(HttpClientTest, ErrorKinds) {
  boost::asio::io_context io;
  {
    HttpClient client(io, At(testing::ClosedPort()));
    EXPECT_EQ(Exchange(io, client, Get("/")).error, HttpErrorKind::kRefused);
  }
  struct Case {
    RawAction action;
    HttpErrorKind expected;
  };
  const std::vector<Case> cases = {
      {{.silent = true}, HttpErrorKind::kTimeout},
      {{.bytes = HttpAnswer(200, "FALSE"), .per_byte = 200ms}, HttpErrorKind::kTimeout},  // ~9 s in full
      {{HttpAnswer(200, std::string(64 * 1024 + 1, 'x'))}, HttpErrorKind::kTooLarge},
      {{"HTTP/1.1 200 OK\r\nX-Big: " + std::string(20000, 'h') + "\r\n\r\n"}, HttpErrorKind::kTooLarge},
      {{"not http at all\r\n\r\n"}, HttpErrorKind::kGarbage},
      {{"HTTP/1.1 200 OK\r\nContent-Length: 50\r\n\r\nshort"}, HttpErrorKind::kGarbage},
      {{""}, HttpErrorKind::kClosed},
  };
  for (const auto& c : cases) {
    RawServer server(io, [&](const std::string&, const std::string&) { return c.action; });
    HttpClient client(io, At(server.port()));
    const auto start = std::chrono::steady_clock::now();
    const HttpOutcome outcome = Exchange(io, client, Get("/x"));
    EXPECT_EQ(outcome.error, c.expected) << outcome.message;
    EXPECT_NE(outcome.message.find("http://127.0.0.1:"), std::string::npos) << outcome.message;
    EXPECT_LT(std::chrono::steady_clock::now() - start, 3s);  // the 300 ms deadline, with room for a loaded machine
  }
}

TEST(HttpClientTest, BodyAtTheLimitIsFine) {
  boost::asio::io_context io;
  RawServer server(io, [](const std::string&, const std::string&) {
    return RawAction{HttpAnswer(404, std::string(64 * 1024, 'x'))};
  });
  HttpClient client(io, At(server.port()));
  const HttpOutcome outcome = Exchange(io, client, Get("/"));
  ASSERT_TRUE(outcome.ok()) << outcome.message;
  EXPECT_EQ(outcome.response.status, 404);
  EXPECT_EQ(outcome.response.body.size(), 64u * 1024);
}

TEST(HttpClientTest, ReusesTheConnectionAndSendsNoProxyHeaders) {
  boost::asio::io_context io;
  RawServer server(io, [](const std::string&, const std::string&) {
    return RawAction{HttpAnswer(200, "ok", {"ETag: 1"}, /*keep_alive=*/true), {}, false, false};
  });
  HttpClient client(io, At(server.port()));
  for (int i = 0; i < 5; ++i) {
    HttpRequest r = Get("/n" + std::to_string(i));
    r.headers.push_back({"Metadata", "true"});
    const HttpOutcome outcome = Exchange(io, client, r);
    ASSERT_TRUE(outcome.ok()) << outcome.message;
    ASSERT_NE(outcome.response.Header("etag"), nullptr);
  }
  EXPECT_EQ(server.connections(), 1);
  for (const auto& head : server.heads()) {
    EXPECT_EQ(head.find("X-Forwarded-For"), std::string::npos);
    EXPECT_EQ(head.find("Proxy"), std::string::npos);
    EXPECT_NE(head.find("Host: 127.0.0.1:"), std::string::npos);
    EXPECT_NE(head.find("Metadata: true"), std::string::npos);
  }
}

// The metadata service is link-local: a proxy from the environment (set on many training
// hosts for pip and git) must never see a metadata request.
TEST(HttpClientTest, IgnoresProxiesFromTheEnvironment) {
  boost::asio::io_context io;
  RawServer proxy(io, [](const std::string&, const std::string&) { return RawAction{HttpAnswer(200, "proxied")}; });
  RawServer server(io, [](const std::string&, const std::string&) { return RawAction{HttpAnswer(200, "direct")}; });
  for (const char* name : {"http_proxy", "HTTP_PROXY", "all_proxy", "ALL_PROXY"}) {
    ::setenv(name, proxy.url().c_str(), 1);
  }
  ::setenv("no_proxy", "", 1);
  HttpClient client(io, At(server.port()));
  const HttpOutcome outcome = Exchange(io, client, Get("/latest/meta-data/spot/instance-action"));
  for (const char* name : {"http_proxy", "HTTP_PROXY", "all_proxy", "ALL_PROXY", "no_proxy"}) ::unsetenv(name);
  ASSERT_TRUE(outcome.ok()) << outcome.message;
  EXPECT_EQ(outcome.response.body, "direct");
  EXPECT_EQ(proxy.connections(), 0);
}

TEST(HttpClientTest, ResendsOnceWhenTheKeptAliveConnectionWasClosed) {
  boost::asio::io_context io;
  int n = 0;
  // Claims keep-alive, then closes: the next request finds a dead connection.
  RawServer server(io, [&](const std::string&, const std::string&) {
    return RawAction{HttpAnswer(200, std::to_string(++n), {}, /*keep_alive=*/true)};
  });
  HttpClient client(io, At(server.port()));
  EXPECT_EQ(Exchange(io, client, Get("/")).response.body, "1");
  testing::RunFor(io, 20ms);  // let the close arrive
  const HttpOutcome second = Exchange(io, client, Get("/"));
  ASSERT_TRUE(second.ok()) << second.message;
  EXPECT_EQ(second.response.body, "2");
  EXPECT_EQ(server.connections(), 2);
}

TEST(HttpClientTest, CancelDropsTheHandler) {
  boost::asio::io_context io;
  RawServer server(io, [](const std::string&, const std::string&) { return RawAction{.silent = true}; });
  HttpClient client(io, At(server.port()));
  bool called = false;
  client.Send(Get("/", 5s), [&](HttpOutcome) { called = true; });
  ASSERT_TRUE(RunUntil(io, [&] { return server.requests() == 1; }));
  EXPECT_TRUE(client.Busy());
  client.Cancel();
  EXPECT_FALSE(client.Busy());
  testing::RunFor(io, 50ms);
  EXPECT_FALSE(called);
  // Usable again afterwards.
  RawServer good(io, [](const std::string&, const std::string&) { return RawAction{HttpAnswer(200, "x")}; });
  HttpClient again(io, At(good.port()));
  EXPECT_TRUE(Exchange(io, again, Get("/")).ok());
}

TEST(HttpClientTest, DestroyingTheClientMidFlightIsSafe) {
  boost::asio::io_context io;
  RawServer server(io, [](const std::string&, const std::string&) {
    return RawAction{.bytes = HttpAnswer(200, "FALSE"), .per_byte = 5ms};
  });
  bool called = false;
  {
    HttpClient client(io, At(server.port()));
    client.Send(Get("/", 5s), [&](HttpOutcome) { called = true; });
    testing::RunFor(io, 30ms);
  }
  testing::RunFor(io, 100ms);
  EXPECT_FALSE(called);
}

TEST(HttpClientTest, ResolvesHostNames) {
  boost::asio::io_context io;
  RawServer server(io, [](const std::string&, const std::string&) { return RawAction{HttpAnswer(200, "named")}; });
  auto ep = http::ParseEndpoint("http://localhost:" + std::to_string(server.port()), "endpoint");
  ASSERT_TRUE(ep.ok());
  HttpClient client(io, *ep);
  const HttpOutcome outcome = Exchange(io, client, Get("/", 2s));
  // localhost may resolve to ::1 first; the client tries every address.
  ASSERT_TRUE(outcome.ok()) << outcome.message;
  EXPECT_EQ(outcome.response.body, "named");
}

}  // namespace
}  // namespace spotvisor

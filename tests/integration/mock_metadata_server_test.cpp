// The mock metadata server speaks each provider's real protocol: required headers, token
// TTL rules, 404 HTML, ETags and held long-polls answered at the flip, Azure api-version,
// acknowledgements, control paths; and the `spotvisor mock-metadata` binary runs, writes
// its port file, flips after --preempt-after and exits 0 on SIGTERM.
#include "spotvisor/mock/mock_metadata_server.hpp"

#include <gtest/gtest.h>
#include <signal.h>

#include <boost/asio/io_context.hpp>
#include <nlohmann/json.hpp>

#include "integration/preemption_test_util.hpp"
#include "spotvisor/http/http_client.hpp"
#include "support/test_support.hpp"

namespace spotvisor {
namespace {

using namespace std::chrono_literals;
using http::HttpClient;
using http::HttpOutcome;
using http::HttpRequest;
using mock::MockMetadataServer;
using mock::MockProvider;

class MockTest : public ::testing::Test {
 protected:
  void Start(MockProvider provider, mock::MockOptions options = {}) {
    server_ = std::make_unique<MockMetadataServer>(io_, provider, options);
    auto port = server_->Start();
    ASSERT_TRUE(port.ok()) << port.error().message;
    client_ = std::make_unique<HttpClient>(io_, *http::ParseEndpoint(server_->url(), "endpoint"));
  }
  HttpOutcome Send(const std::string& method, const std::string& target, std::vector<http::HttpHeader> headers = {},
                   std::string body = "", std::chrono::milliseconds timeout = 2s) {
    HttpRequest r;
    r.method = method;
    r.target = target;
    r.headers = std::move(headers);
    r.body = std::move(body);
    r.timeout = timeout;
    std::optional<HttpOutcome> result;
    client_->Send(std::move(r), [&](HttpOutcome o) { result = std::move(o); });
    EXPECT_TRUE(testing::RunUntil(
        io_, [&] { return result.has_value(); }, timeout + 1s));
    EXPECT_TRUE(result && result->ok()) << (result ? result->message : "no answer");
    return result.value_or(HttpOutcome{});
  }

  boost::asio::io_context io_;
  std::unique_ptr<MockMetadataServer> server_;
  std::unique_ptr<HttpClient> client_;
};

constexpr const char* kTtl = "X-aws-ec2-metadata-token-ttl-seconds";
constexpr const char* kToken = "X-aws-ec2-metadata-token";
constexpr const char* kAction = "/latest/meta-data/spot/instance-action";

TEST_F(MockTest, AwsTokenRules) {
  Start(MockProvider::kAws, {.imdsv2_required = true});
  EXPECT_EQ(Send("PUT", "/latest/api/token").response.status, 400);
  EXPECT_EQ(Send("PUT", "/latest/api/token", {{kTtl, "0"}}).response.status, 400);
  EXPECT_EQ(Send("PUT", "/latest/api/token", {{kTtl, "21601"}}).response.status, 400);
  EXPECT_EQ(Send("PUT", "/latest/api/token", {{kTtl, "60"}, {"X-Forwarded-For", "1.2.3.4"}}).response.status, 403);
  EXPECT_EQ(Send("GET", "/latest/api/token", {{kTtl, "60"}}).response.status, 405);
  const auto token = Send("PUT", "/latest/api/token", {{kTtl, "1"}});
  ASSERT_EQ(token.response.status, 200);
  ASSERT_NE(token.response.Header(kTtl), nullptr);
  EXPECT_EQ(*token.response.Header(kTtl), "1");
  const std::string tok = token.response.body;
  EXPECT_EQ(Send("GET", kAction).response.status, 401);  // v2 required
  const auto missing = Send("GET", kAction, {{kToken, tok}});
  EXPECT_EQ(missing.response.status, 404);
  EXPECT_NE(missing.response.body.find("<title>404 - Not Found</title>"), std::string::npos);
  EXPECT_EQ(Send("GET", "/latest/meta-data/instance-type", {{kToken, tok}}).response.body, "g5.xlarge");
  EXPECT_EQ(Send("GET", "/latest/meta-data/instance-action", {{kToken, tok}}).response.body, "none");
  testing::RunFor(io_, 1100ms);
  EXPECT_EQ(Send("GET", kAction, {{kToken, tok}}).response.status, 401);  // expired
}

TEST_F(MockTest, AwsNoticeAndV1WhenNotRequired) {
  Start(MockProvider::kAws);
  EXPECT_EQ(Send("GET", kAction).response.status, 404);
  EXPECT_EQ(Send("GET", kAction, {{kToken, "forged"}}).response.status, 401);
  server_->Preempt({.action = "hibernate", .deadline_in = 90s});
  const auto notice = Send("GET", kAction);
  ASSERT_EQ(notice.response.status, 200);
  const auto doc = nlohmann::json::parse(notice.response.body);
  EXPECT_EQ(doc["action"], "hibernate");
  EXPECT_EQ(doc["time"].get<std::string>().size(), 20u);
  EXPECT_EQ(Send("GET", "/latest/meta-data/spot/termination-time").response.status, 200);
  EXPECT_EQ(Send("GET", "/latest/meta-data/events/recommendations/rebalance").response.status, 404);
}

TEST_F(MockTest, AlibabaTokenHeaders) {
  Start(MockProvider::kAlibaba, {.imdsv2_required = true});
  const auto token = Send("PUT", "/latest/api/token", {{"X-aliyun-ecs-metadata-token-ttl-seconds", "30"}});
  ASSERT_EQ(token.response.status, 200);
  constexpr const char* kPath = "/latest/meta-data/instance/spot/termination-time";
  EXPECT_EQ(Send("GET", kPath).response.status, 401);
  EXPECT_EQ(Send("GET", kPath, {{"X-aliyun-ecs-metadata-token", token.response.body}}).response.status, 404);
  server_->Preempt();
  const auto t = Send("GET", kPath, {{"X-aliyun-ecs-metadata-token", token.response.body}});
  EXPECT_EQ(t.response.status, 200);
  EXPECT_EQ(t.response.body.size(), 20u);  // 2015-01-05T18:02:00Z
}

constexpr const char* kPreempted = "/computeMetadata/v1/instance/preempted";

TEST_F(MockTest, GcpHeadersAndEtags) {
  Start(MockProvider::kGcp);
  EXPECT_EQ(Send("GET", kPreempted).response.status, 403);
  EXPECT_EQ(Send("GET", kPreempted, {{"Metadata-Flavor", "Google"}, {"X-Forwarded-For", "x"}}).response.status, 403);
  const auto first = Send("GET", kPreempted, {{"Metadata-Flavor", "Google"}});
  ASSERT_EQ(first.response.status, 200);
  EXPECT_EQ(first.response.body, "FALSE");
  ASSERT_NE(first.response.Header("ETag"), nullptr);
  ASSERT_NE(first.response.Header("Metadata-Flavor"), nullptr);
  EXPECT_EQ(*first.response.Header("Metadata-Flavor"), "Google");
  EXPECT_EQ(first.response.Header("ETag")->size(), 16u);
  EXPECT_EQ(Send("GET", "/computeMetadata/v1/instance/nope", {{"Metadata-Flavor", "Google"}}).response.status, 404);
  EXPECT_EQ(Send("GET", "/computeMetadata/v1/instance/?wait_for_change=true", {{"Metadata-Flavor", "Google"}})
                .response.status,
            400);
  const auto listing = Send("GET", "/computeMetadata/v1/instance/", {{"Metadata-Flavor", "Google"}});
  EXPECT_NE(listing.response.body.find("preempted\n"), std::string::npos);
  EXPECT_NE(listing.response.body.find("scheduling/\n"), std::string::npos);
  const auto recursive = Send("GET", "/computeMetadata/v1/instance/?recursive=true", {{"Metadata-Flavor", "Google"}});
  EXPECT_EQ(nlohmann::json::parse(recursive.response.body)["scheduling"]["preemptible"], "TRUE");
  EXPECT_EQ(nlohmann::json::parse(recursive.response.body)["maintenanceEvent"], "NONE");

  // A stale last_etag answers at once; timeout_sec answers with the same value and ETag.
  const std::string etag = *first.response.Header("ETag");
  EXPECT_EQ(Send("GET", std::string(kPreempted) + "?wait_for_change=true&last_etag=0000000000000000",
                 {{"Metadata-Flavor", "Google"}})
                .response.body,
            "FALSE");
  const auto start = std::chrono::steady_clock::now();
  const auto timed_out = Send("GET", std::string(kPreempted) + "?wait_for_change=true&timeout_sec=1&last_etag=" + etag,
                              {{"Metadata-Flavor", "Google"}}, "", 3s);
  EXPECT_GE(std::chrono::steady_clock::now() - start, 1s);
  EXPECT_EQ(timed_out.response.body, "FALSE");
  EXPECT_EQ(*timed_out.response.Header("ETag"), etag);
}

TEST_F(MockTest, GcpHeldLongPollIsAnsweredAtTheFlip) {
  Start(MockProvider::kGcp);
  const auto first = Send("GET", kPreempted, {{"Metadata-Flavor", "Google"}});
  const std::string etag = *first.response.Header("ETag");
  HttpRequest r;
  r.target = std::string(kPreempted) + "?wait_for_change=true&timeout_sec=30&last_etag=" + etag;
  r.headers = {{"Metadata-Flavor", "Google"}};
  r.timeout = 10s;
  std::optional<HttpOutcome> result;
  client_->Send(std::move(r), [&](HttpOutcome o) { result = std::move(o); });
  testing::RunFor(io_, 200ms);
  EXPECT_FALSE(result.has_value());
  const auto flip = std::chrono::steady_clock::now();
  server_->Preempt();
  ASSERT_TRUE(testing::RunUntil(
      io_, [&] { return result.has_value(); }, 2s));
  EXPECT_LT(std::chrono::steady_clock::now() - flip, 1s);  // at the flip, not at timeout_sec=30
  EXPECT_EQ(result->response.body, "TRUE");
  EXPECT_NE(*result->response.Header("ETag"), etag);
}

constexpr const char* kEvents = "/metadata/scheduledevents?api-version=2020-07-01";

TEST_F(MockTest, AzureScheduledEvents) {
  Start(MockProvider::kAzure, {.vm_name = "me", .azure_rate_limit = 0});
  EXPECT_EQ(Send("GET", kEvents).response.status, 400);
  EXPECT_EQ(Send("GET", "/metadata/scheduledevents", {{"Metadata", "true"}}).response.status, 400);
  EXPECT_EQ(Send("GET", kEvents, {{"Metadata", "true"}, {"X-Forwarded-For", "x"}}).response.status, 400);
  auto empty = nlohmann::json::parse(Send("GET", kEvents, {{"Metadata", "true"}}).response.body);
  EXPECT_TRUE(empty["Events"].empty());
  EXPECT_EQ(Send("GET", "/metadata/instance/compute/name?api-version=2021-02-01&format=text", {{"Metadata", "true"}})
                .response.body,
            "me");

  server_->Preempt();
  auto doc = nlohmann::json::parse(Send("GET", kEvents, {{"Metadata", "true"}}).response.body);
  ASSERT_EQ(doc["Events"].size(), 2u);  // ours and another VM's
  EXPECT_GT(doc["DocumentIncarnation"].get<int>(), empty["DocumentIncarnation"].get<int>());
  std::string ours;
  for (const auto& e : doc["Events"]) {
    if (e["Resources"][0] == "me") ours = e["EventId"];
    EXPECT_EQ(e["EventStatus"], "Scheduled");
    EXPECT_NE(e["NotBefore"].get<std::string>().find(" GMT"), std::string::npos);
  }
  ASSERT_FALSE(ours.empty());
  EXPECT_EQ(
      Send("POST", kEvents, {{"Metadata", "true"}}, R"({"StartRequests": [{"EventId": "nope"}]})").response.status,
      400);
  EXPECT_EQ(Send("POST", kEvents, {{"Metadata", "true"}}, R"({"StartRequests": [{"EventId": ")" + ours + R"("}]})")
                .response.status,
            200);
  doc = nlohmann::json::parse(Send("GET", kEvents, {{"Metadata", "true"}}).response.body);
  for (const auto& e : doc["Events"]) {
    if (e["EventId"] != ours) continue;
    EXPECT_EQ(e["EventStatus"], "Started");
    EXPECT_EQ(e["NotBefore"], "");
  }
  EXPECT_EQ(server_->acknowledged(), std::vector<std::string>{ours});
}

TEST_F(MockTest, AzureRateLimit) {
  Start(MockProvider::kAzure, {.azure_rate_limit = 5});
  int throttled = 0;
  for (int i = 0; i < 8; ++i) throttled += Send("GET", kEvents, {{"Metadata", "true"}}).response.status == 429;
  EXPECT_EQ(throttled, 3);
}

TEST_F(MockTest, ControlPaths) {
  Start(MockProvider::kAws);
  EXPECT_EQ(Send("POST", "/__spotvisor/preempt", {}, "{\"bogus\": 1}").response.status, 400);
  const auto state = Send("POST", "/__spotvisor/preempt", {}, R"({"action": "stop", "deadline_in_s": 30})");
  ASSERT_EQ(state.response.status, 200);
  EXPECT_TRUE(nlohmann::json::parse(state.response.body)["preempted"].get<bool>());
  EXPECT_TRUE(server_->preempted());
  EXPECT_NE(Send("GET", kAction).response.body.find("\"stop\""), std::string::npos);
  EXPECT_EQ(Send("POST", "/__spotvisor/clear").response.status, 200);
  EXPECT_FALSE(server_->preempted());
  EXPECT_EQ(Send("GET", "/__spotvisor/preempt").response.status, 405);
  const auto got = nlohmann::json::parse(Send("GET", "/__spotvisor/state").response.body);
  EXPECT_EQ(got["provider"], "aws");
  EXPECT_FALSE(got["preempted"].get<bool>());
}

TEST(PreemptSpecTest, Parses) {
  EXPECT_TRUE(mock::ParsePreemptSpec("").ok());
  EXPECT_TRUE(mock::ParsePreemptSpec("  \n").ok());
  auto spec = mock::ParsePreemptSpec(
      R"({"action":"stop","deadline_in_s":1.5,"rebalance":true,"notice":false,"maintenance":true,)"
      R"("event_type":"Terminate","other_vm_only":true})");
  ASSERT_TRUE(spec.ok()) << spec.error().message;
  EXPECT_EQ(spec->action, "stop");
  EXPECT_EQ(spec->deadline_in, std::chrono::milliseconds(1500));
  EXPECT_TRUE(spec->rebalance && !spec->notice && spec->maintenance && spec->other_vm_only);
  EXPECT_EQ(spec->event_type, "Terminate");
  for (const char* bad : {"[]", "{", R"({"action":"explode"})", R"({"deadline_in_s":"soon"})",
                          R"({"deadline_in_s":1e300})", R"({"event_type":""})", R"({"x":1})"}) {
    EXPECT_FALSE(mock::ParsePreemptSpec(bad).ok()) << bad;
  }
}

TEST(MockCommandTest, PortFilePreemptAfterAndSigterm) {
  testing::TempDir dir;
  const auto port_file = dir / "port";
  auto child = testing::Spawn({SPOTVISOR_BINARY, "mock-metadata", "--provider", "gcp", "--listen", "127.0.0.1:0",
                               "--port-file", port_file.string(), "--preempt-after", "300ms"},
                              dir / "out.log");
  ASSERT_TRUE(testing::WaitUntil([&] { return std::filesystem::exists(port_file); }, 10s))
      << testing::ReadFile(dir / "out.log");
  const std::string port = testing::ReadFile(port_file);
  boost::asio::io_context io;
  HttpClient client(io, *http::ParseEndpoint("http://127.0.0.1:" + port.substr(0, port.find('\n')), "endpoint"));
  std::string value;
  const auto deadline = std::chrono::steady_clock::now() + 10s;
  while (value != "TRUE" && std::chrono::steady_clock::now() < deadline) {
    std::optional<HttpOutcome> result;
    client.Send({"GET", kPreempted, {{"Metadata-Flavor", "Google"}}, "", 1s},
                [&](HttpOutcome o) { result = std::move(o); });
    ASSERT_TRUE(testing::RunUntil(
        io, [&] { return result.has_value(); }, 2s));
    ASSERT_TRUE(result->ok()) << result->message;
    value = result->response.body;
    if (value != "TRUE") testing::RunFor(io, 50ms);
  }
  EXPECT_EQ(value, "TRUE");
  ::kill(child.pid, SIGTERM);
  EXPECT_EQ(testing::WaitExit(child.pid, 10s), 0) << testing::ReadFile(dir / "out.log");
}

TEST(MockCommandTest, UsageErrors) {
  std::string out;
  EXPECT_EQ(testing::RunSpotvisor({"mock-metadata", "--provider", "oracle"}, &out), 64) << out;
  EXPECT_EQ(testing::RunSpotvisor({"mock-metadata", "--provider", "aws", "--listen", "nowhere"}, &out), 64) << out;
  EXPECT_EQ(testing::RunSpotvisor(
                {"mock-metadata", "--provider", "aws", "--listen", "127.0.0.1:0", "--preempt-after", "soon"}, &out),
            64)
      << out;
}

}  // namespace
}  // namespace spotvisor

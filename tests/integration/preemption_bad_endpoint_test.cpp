// Every watcher against every kind of broken metadata endpoint: refused, silent, headers
// trickling in, 5xx, 404 HTML, not HTTP, truncated JSON, truncated HTTP, an oversized
// body, a token endpoint answering 200 with nothing. None may give a notice or a
// "cleared", none may crash, and each condition is logged once, not once per poll.
#include <gtest/gtest.h>

#include <boost/asio/io_context.hpp>

#include "integration/preemption_test_util.hpp"
#include "spotvisor/preemption/watcher.hpp"

namespace spotvisor {
namespace {

using namespace std::chrono_literals;
using config::ProviderKind;
using testing::HttpAnswer;
using testing::RawAction;

enum class Bad {
  kRefused,
  kSilent,
  kTrickle,
  kServerError,
  kNotFoundHtml,
  kNotHttp,
  kTruncatedJson,
  kTruncatedHttp,
  kOversized,
  kEmptyToken,
};

const char* Name(Bad b) {
  switch (b) {
    case Bad::kRefused:
      return "refused";
    case Bad::kSilent:
      return "silent";
    case Bad::kTrickle:
      return "trickle";
    case Bad::kServerError:
      return "server_error";
    case Bad::kNotFoundHtml:
      return "not_found_html";
    case Bad::kNotHttp:
      return "not_http";
    case Bad::kTruncatedJson:
      return "truncated_json";
    case Bad::kTruncatedHttp:
      return "truncated_http";
    case Bad::kOversized:
      return "oversized";
    case Bad::kEmptyToken:
      return "empty_token";
  }
  return "?";
}

// A believable notice body for the provider, so that only the misbehaviour stops it.
std::string NoticeBody(ProviderKind k) {
  switch (k) {
    case ProviderKind::kAws:
      return R"({"action": "terminate", "time": "2030-01-01T00:00:00Z"})";
    case ProviderKind::kGcp:
      return "TRUE";
    case ProviderKind::kAzure:
      return R"({"DocumentIncarnation": 2, "Events": [{"EventId": "E1", "EventType": "Preempt",)"
             R"( "ResourceType": "VirtualMachine", "Resources": ["vm"], "EventStatus": "Scheduled",)"
             R"( "NotBefore": "Tue, 16 Mar 2021 00:58:46 GMT"}]})";
    default:
      return "2030-01-01T00:00:00Z";
  }
}

std::vector<std::string> Headers(ProviderKind k) {
  if (k == ProviderKind::kGcp) return {"Metadata-Flavor: Google", "ETag: abc"};
  return {};
}

RawAction Misbehave(Bad bad, ProviderKind k, const std::string& head) {
  const bool token = head.rfind("PUT ", 0) == 0;
  const std::string good = HttpAnswer(200, token ? "tok" : NoticeBody(k), Headers(k));
  switch (bad) {
    case Bad::kRefused:
      return {};
    case Bad::kSilent:
      return {.silent = true};
    case Bad::kTrickle:
      return {.bytes = good, .per_byte = 1000ms};
    case Bad::kServerError:
      return {HttpAnswer(500, "Internal Server Error")};
    case Bad::kNotFoundHtml:
      return {HttpAnswer(404, "<html><body><h1>404 - Not Found</h1></body></html>", {"Content-Type: text/html"})};
    case Bad::kNotHttp:
      return {"SSH-2.0-OpenSSH_9.2\r\n\r\n\x01\x02garbage"};
    case Bad::kTruncatedJson: {
      const std::string body = NoticeBody(k);
      return {HttpAnswer(200, token ? "tok" : body.substr(0, body.size() / 2), Headers(k))};
    }
    case Bad::kTruncatedHttp:
      return {good.substr(0, good.size() - 5)};
    case Bad::kOversized: {
      std::string huge = NoticeBody(k) + std::string(100 * 1024, ' ');
      return {HttpAnswer(200, token ? "tok" : huge, Headers(k))};
    }
    case Bad::kEmptyToken:
      return {HttpAnswer(200, token ? "" : NoticeBody(k), Headers(k))};
  }
  return {};
}

class BadEndpointTest : public ::testing::TestWithParam<std::tuple<ProviderKind, Bad>> {};

TEST_P(BadEndpointTest, NoNoticeNoCrashLoggedOnce) {
  const auto [kind, bad] = GetParam();
  boost::asio::io_context io;
  testing::RawServer server(
      io, [kind = kind, bad = bad](const std::string& head, const std::string&) { return Misbehave(bad, kind, head); });
  const std::string url =
      bad == Bad::kRefused ? "http://127.0.0.1:" + std::to_string(testing::ClosedPort()) : server.url();
  auto p = testing::FastProvider(kind, url);
  p.request_timeout = 150ms;
  p.azure_vm_name = "vm";
  auto tuning = testing::FastTuning();
  tuning.long_poll_timeout = std::chrono::seconds(1);
  tuning.azure_first_call_timeout = 150ms;
  testing::LogCapture logs;
  auto watcher = preemption::MakeWatcher(io, SystemClock(), p, tuning);
  ASSERT_TRUE(watcher.ok()) << watcher.error().message;
  testing::Recorder rec;
  (*watcher)->Start(rec.OnNotice(), rec.OnCleared());

  // A GCP 404 is the metadata server hiding the key from a pod (GKE Workload Identity): it
  // is said once as the watcher going blind, not as an endpoint condition.
  const std::string said =
      kind == ProviderKind::kGcp && bad == Bad::kNotFoundHtml ? "event=watcher_blind" : "event=endpoint_condition";
  testing::RunFor(io, 400ms);
  const int logged = logs.Count(said);
  testing::RunFor(io, 400ms);
  EXPECT_TRUE(rec.notices.empty()) << rec.notices[0].id;
  EXPECT_EQ(rec.cleared, 0);
  const bool aws_like = kind == ProviderKind::kAws || kind == ProviderKind::kAlibaba;
  if (bad == Bad::kNotFoundHtml && aws_like) {
    EXPECT_EQ(logged, 1);  // "no notice" on the probe paths; only the token PUT is wrong
  } else {
    EXPECT_GE(logged, 1) << "the condition must be logged";
  }
  EXPECT_EQ(logs.Count(said), logged) << "logged again on later polls";
  (*watcher)->Stop();
}

// An endpoint that fails for a while: the error backoff stops at a tenth of
// provider.default_window (here 500 ms → 50 ms), not at the 10 s tuning ceiling, so an
// outage delays the first sight of a notice by at most that. Uncapped, the delays from
// the 20 ms poll (20, 40, … 640 ms) would allow 7 requests in 1.5 s; capped, about 28.
class ErrorBackoffTest : public ::testing::TestWithParam<ProviderKind> {};

TEST_P(ErrorBackoffTest, CeilingIsATenthOfTheWarningWindow) {
  const ProviderKind kind = GetParam();
  boost::asio::io_context io;
  testing::RawServer server(io,
                            [](const std::string&, const std::string&) { return RawAction{HttpAnswer(500, "down")}; });
  auto p = testing::FastProvider(kind, server.url());
  p.default_window = 500ms;
  p.azure_vm_name = "vm";
  auto tuning = testing::FastTuning();
  tuning.backoff_max = 10s;
  testing::LogCapture logs;
  auto watcher = preemption::MakeWatcher(io, SystemClock(), p, tuning);
  ASSERT_TRUE(watcher.ok()) << watcher.error().message;
  testing::Recorder rec;
  (*watcher)->Start(rec.OnNotice(), rec.OnCleared());
  testing::RunFor(io, 1500ms);
  (*watcher)->Stop();
  EXPECT_EQ(logs.Count("backoff_max_ms=50 "), 1) << logs.Joined();
  // GCP long-polls two keys, each with its own backoff: count one of them.
  const int requests =
      kind == ProviderKind::kGcp ? server.requests_to("/computeMetadata/v1/instance/preempted") : server.requests();
  EXPECT_GE(requests, 15) << logs.Joined();
  EXPECT_TRUE(rec.notices.empty());
}

INSTANTIATE_TEST_SUITE_P(AllProviders, ErrorBackoffTest,
                         ::testing::Values(ProviderKind::kAws, ProviderKind::kGcp, ProviderKind::kAzure,
                                           ProviderKind::kAlibaba),
                         [](const auto& param_info) { return std::string(config::ToString(param_info.param)); });

std::vector<std::tuple<ProviderKind, Bad>> AllCases() {
  std::vector<std::tuple<ProviderKind, Bad>> cases;
  for (const auto kind : {ProviderKind::kAws, ProviderKind::kGcp, ProviderKind::kAzure, ProviderKind::kAlibaba}) {
    for (const auto bad :
         {Bad::kRefused, Bad::kSilent, Bad::kTrickle, Bad::kServerError, Bad::kNotFoundHtml, Bad::kNotHttp,
          Bad::kTruncatedJson, Bad::kTruncatedHttp, Bad::kOversized, Bad::kEmptyToken}) {
      const bool tokenless = kind == ProviderKind::kGcp || kind == ProviderKind::kAzure;
      if (bad == Bad::kEmptyToken && tokenless) continue;
      cases.emplace_back(kind, bad);
    }
  }
  return cases;
}

INSTANTIATE_TEST_SUITE_P(AllProviders, BadEndpointTest, ::testing::ValuesIn(AllCases()), [](const auto& param_info) {
  return std::string(config::ToString(std::get<0>(param_info.param))) + "_" + Name(std::get<1>(param_info.param));
});

}  // namespace
}  // namespace spotvisor

// The GCP watcher against the in-process mock: the long-poll returns at the flip (so the
// notice arrives within milliseconds, not a poll interval), maintenance-event
// TERMINATE_ON_HOST_MAINTENANCE is a notice and MIGRATE is not, 503 is retried after the
// configured delay, and an endpoint that answers wait_for_change at once cannot make the
// watcher spin.
#include <gtest/gtest.h>

#include <boost/asio/io_context.hpp>

#include "integration/preemption_test_util.hpp"
#include "spotvisor/mock/mock_metadata_server.hpp"
#include "spotvisor/preemption/watcher.hpp"
#include "support/log_capture.hpp"

namespace spotvisor {
namespace {

using namespace std::chrono_literals;
using config::ProviderKind;
using testing::FastProvider;
using testing::FastTuning;
using testing::HttpAnswer;
using testing::RawAction;
using testing::RawServer;
using testing::Recorder;
using testing::RunFor;
using testing::RunUntil;

constexpr const char* kPreempted = "/computeMetadata/v1/instance/preempted";
constexpr const char* kMaintenance = "/computeMetadata/v1/instance/maintenance-event";

std::unique_ptr<preemption::Watcher> Watch(boost::asio::io_context& io, const config::ProviderSection& p,
                                           Recorder& rec) {
  auto watcher = preemption::MakeWatcher(io, SystemClock(), p, FastTuning());
  EXPECT_TRUE(watcher.ok());
  if (!watcher.ok()) return nullptr;
  (*watcher)->Start(rec.OnNotice(), rec.OnCleared());
  return std::move(*watcher);
}

TEST(GcpWatcherTest, LongPollDeliversTheFlipAtOnce) {
  boost::asio::io_context io;
  mock::MockMetadataServer server(io, mock::MockProvider::kGcp, {});
  ASSERT_TRUE(server.Start().ok());
  auto p = FastProvider(ProviderKind::kGcp, server.url());
  p.poll_interval = 5s;  // the long-poll, not polling, must deliver the notice
  Recorder rec;
  auto watcher = Watch(io, p, rec);
  // Both keys read once, then both long-polls are held by the server.
  ASSERT_TRUE(RunUntil(io, [&] { return server.requests() >= 4; }));
  RunFor(io, 100ms);
  EXPECT_EQ(server.requests(), 4u);
  EXPECT_TRUE(rec.notices.empty());

  const auto flip = std::chrono::steady_clock::now();
  server.Preempt();
  ASSERT_TRUE(RunUntil(
      io, [&] { return !rec.notices.empty(); }, 2s));
  const auto latency = std::chrono::steady_clock::now() - flip;
  RecordProperty("flip_to_notice_us",
                 static_cast<int>(std::chrono::duration_cast<std::chrono::microseconds>(latency).count()));
  EXPECT_LT(latency, 1s);  // at the flip, far under the 5 s poll
  ASSERT_EQ(rec.notices.size(), 1u);
  const auto& n = rec.notices[0];
  EXPECT_EQ(n.provider, "gcp");
  EXPECT_EQ(n.kind, "preempt");
  ASSERT_TRUE(n.deadline.has_value());
  const auto left = *n.deadline - std::chrono::system_clock::now();
  EXPECT_GT(left, 25s);
  EXPECT_LE(left, 30s);
  RunFor(io, 100ms);
  EXPECT_EQ(rec.notices.size(), 1u);

  server.Clear();
  ASSERT_TRUE(RunUntil(
      io, [&] { return rec.cleared == 1; }, 2s));
  server.Preempt();  // a later preemption is a new notice
  ASSERT_TRUE(RunUntil(
      io, [&] { return rec.notices.size() == 2; }, 2s));
}

TEST(GcpWatcherTest, TerminateMaintenanceIsANotice) {
  boost::asio::io_context io;
  mock::MockMetadataServer server(io, mock::MockProvider::kGcp, {});
  ASSERT_TRUE(server.Start().ok());
  Recorder rec;
  auto watcher = Watch(io, FastProvider(ProviderKind::kGcp, server.url()), rec);
  server.Preempt({.maintenance = true});
  ASSERT_TRUE(RunUntil(
      io, [&] { return !rec.notices.empty(); }, 2s));
  EXPECT_EQ(rec.notices[0].kind, "maintenance");
  EXPECT_NE(rec.notices[0].detail.find("TERMINATE_ON_HOST_MAINTENANCE"), std::string::npos);
}

// A scripted metadata server: `value(key)` answers each request with an ETag that changes
// with the value; wait_for_change is answered at once (the misbehaviour under test).
RawServer::Script ImpatientServer(std::function<std::string(const std::string&)> value) {
  return [value](const std::string& head, const std::string&) {
    const std::string key = head.find(kPreempted) != std::string::npos ? "preempted" : "maintenance";
    const std::string v = value(key);
    return RawAction{HttpAnswer(200, v, {"Metadata-Flavor: Google", "ETag: etag-" + v}, true), {}, false, false};
  };
}

TEST(GcpWatcherTest, AnEndpointAnsweringLongPollsAtOnceDoesNotMakeItSpin) {
  boost::asio::io_context io;
  RawServer server(io, ImpatientServer([](const std::string& key) {
                     return key == "preempted" ? "FALSE" : "MIGRATE_ON_HOST_MAINTENANCE";
                   }));
  auto p = FastProvider(ProviderKind::kGcp, server.url());
  p.poll_interval = 100ms;
  Recorder rec;
  auto watcher = Watch(io, p, rec);
  RunFor(io, 1000ms);
  // Two keys at one request per 100 ms each: about 20; a spin would be thousands.
  EXPECT_LE(server.requests(), 26);
  EXPECT_GE(server.requests(), 10);
  EXPECT_TRUE(rec.notices.empty());  // MIGRATE_ON_HOST_MAINTENANCE is not a stop
}

TEST(GcpWatcherTest, ServiceUnavailableIsRetriedAfterTheConfiguredDelay) {
  boost::asio::io_context io;
  int answered = 0;
  RawServer server(io, [&](const std::string& head, const std::string&) {
    if (head.find(kMaintenance) != std::string::npos) {
      return RawAction{HttpAnswer(200, "NONE", {"Metadata-Flavor: Google", "ETag: m1"})};
    }
    if (++answered <= 3) return RawAction{HttpAnswer(503, "Service Unavailable")};
    return RawAction{HttpAnswer(200, "TRUE", {"Metadata-Flavor: Google", "ETag: p1"})};
  });
  auto p = FastProvider(ProviderKind::kGcp, server.url());
  auto tuning = FastTuning();
  tuning.retry_after_503 = 100ms;
  auto watcher = preemption::MakeWatcher(io, SystemClock(), p, tuning);
  ASSERT_TRUE(watcher.ok());
  Recorder rec;
  testing::LogCapture logs;
  const auto start = std::chrono::steady_clock::now();
  (*watcher)->Start(rec.OnNotice(), rec.OnCleared());
  ASSERT_TRUE(RunUntil(
      io, [&] { return !rec.notices.empty(); }, 3s));
  EXPECT_GE(std::chrono::steady_clock::now() - start, 300ms);  // three 503s, 100 ms apart
  EXPECT_EQ(logs.Count("condition=status_503"), 1);
  EXPECT_EQ(logs.Count("endpoint_recovered"), 1);
}

TEST(GcpWatcherTest, AnswersWithoutMetadataFlavorAreNotTrusted) {
  boost::asio::io_context io;
  RawServer server(
      io, [](const std::string&, const std::string&) { return RawAction{HttpAnswer(200, "TRUE", {"ETag: x"})}; });
  Recorder rec;
  testing::LogCapture logs;
  auto watcher = Watch(io, FastProvider(ProviderKind::kGcp, server.url()), rec);
  RunFor(io, 400ms);
  EXPECT_TRUE(rec.notices.empty());
  EXPECT_EQ(logs.Count("condition=garbage"), 2);  // once per key, not once per poll
}

TEST(GcpWatcherTest, RequestsCarryTheProtocol) {
  boost::asio::io_context io;
  mock::MockMetadataServer mock(io, mock::MockProvider::kGcp, {});
  ASSERT_TRUE(mock.Start().ok());
  // The mock answers 403 without Metadata-Flavor: Google, so a notice proves the header.
  Recorder rec;
  mock.Preempt();
  auto watcher = Watch(io, FastProvider(ProviderKind::kGcp, mock.url()), rec);
  ASSERT_TRUE(RunUntil(
      io, [&] { return !rec.notices.empty(); }, 2s));
  EXPECT_GE(mock.requests_to(kPreempted), 1u);
  EXPECT_GE(mock.requests_to(kMaintenance), 1u);
}

// A pod behind the GKE metadata server (Workload Identity) gets 404 for both keys: one
// warning naming the cause, no retries (no error-backoff spam), and a stop still comes
// from SIGTERM alone (the watcher simply has nothing to say).
TEST(GcpWatcherTest, HiddenKeysUnderGkeWorkloadIdentityGiveOneWarningAndNoRetries) {
  boost::asio::io_context io;
  mock::MockOptions options;
  options.gke_workload_identity = true;
  mock::MockMetadataServer mock(io, mock::MockProvider::kGcp, options);
  ASSERT_TRUE(mock.Start().ok());
  Recorder rec;
  testing::LogCapture logs;
  auto watcher = Watch(io, FastProvider(ProviderKind::kGcp, mock.url()), rec);
  ASSERT_TRUE(RunUntil(
      io, [&] { return mock.requests() >= 2; }, 2s));
  RunFor(io, 500ms);  // many poll intervals of FastProvider
  EXPECT_EQ(mock.requests_to(kPreempted), 1u) << logs.Joined();
  EXPECT_EQ(mock.requests_to(kMaintenance), 1u);
  EXPECT_EQ(logs.Count("event=watcher_blind"), 1) << logs.Joined();
  EXPECT_EQ(logs.Count("Workload Identity"), 1);
  EXPECT_EQ(logs.Count("hostNetwork"), 1);
  EXPECT_EQ(logs.Count("condition="), 0) << logs.Joined();  // no error conditions logged
  mock.Preempt();                                           // the hidden key stays hidden: no notice can come
  RunFor(io, 200ms);
  EXPECT_TRUE(rec.notices.empty());
}

}  // namespace
}  // namespace spotvisor

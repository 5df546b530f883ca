// The Azure watcher against the in-process mock: the VM name comes from the instance
// metadata, only this VM's Preempt/Terminate events count (another VM's event and Freeze
// do not), NotBefore becomes the deadline, each EventId is reported once, acknowledgement
// posts StartRequests, 429 backs off.
#include <gtest/gtest.h>

#include <boost/asio/io_context.hpp>

#include "integration/preemption_test_util.hpp"
#include "spotvisor/mock/mock_metadata_server.hpp"
#include "spotvisor/preemption/watcher.hpp"

namespace spotvisor {
namespace {

using namespace std::chrono_literals;
using config::ProviderKind;
using testing::FastProvider;
using testing::FastTuning;
using testing::Recorder;
using testing::RunFor;
using testing::RunUntil;

constexpr const char* kEvents = "/metadata/scheduledevents";

class AzureWatcherTest : public ::testing::Test {
 protected:
  void SetUp() override {
    mock_ = std::make_unique<mock::MockMetadataServer>(
        io_, mock::MockProvider::kAzure, mock::MockOptions{.vm_name = "trainer-7", .azure_rate_limit = 0});
    ASSERT_TRUE(mock_->Start().ok());
  }
  void StartWatcher(config::ProviderSection p) {
    auto watcher = preemption::MakeWatcher(io_, SystemClock(), p, FastTuning());
    ASSERT_TRUE(watcher.ok()) << watcher.error().message;
    watcher_ = std::move(*watcher);
    watcher_->Start(rec_.OnNotice(), rec_.OnCleared());
  }
  config::ProviderSection Provider() { return FastProvider(ProviderKind::kAzure, mock_->url()); }

  boost::asio::io_context io_;
  std::unique_ptr<mock::MockMetadataServer> mock_;
  std::unique_ptr<preemption::Watcher> watcher_;
  Recorder rec_;
};

TEST_F(AzureWatcherTest, PreemptOfThisVmIsOneNoticeWithNotBeforeAsDeadline) {
  StartWatcher(Provider());
  ASSERT_TRUE(RunUntil(io_, [&] { return mock_->requests_to(kEvents) >= 2; }));
  EXPECT_EQ(mock_->requests_to("/metadata/instance/compute/name"), 1u);
  mock_->Preempt({.deadline_in = 40s});
  ASSERT_TRUE(RunUntil(io_, [&] { return !rec_.notices.empty(); }));
  const auto polls = mock_->requests_to(kEvents);
  ASSERT_TRUE(RunUntil(io_, [&] { return mock_->requests_to(kEvents) >= polls + 5; }));
  ASSERT_EQ(rec_.notices.size(), 1u);  // the other VM's event is not ours
  const auto& n = rec_.notices[0];
  EXPECT_EQ(n.provider, "azure");
  EXPECT_EQ(n.kind, "preempt");
  EXPECT_EQ(n.id.size(), 36u);  // the EventId GUID
  ASSERT_TRUE(n.deadline.has_value());
  const auto left = *n.deadline - std::chrono::system_clock::now();
  EXPECT_GT(left, 37s);
  EXPECT_LE(left, 40s);
  EXPECT_NE(n.detail.find("trainer-7"), std::string::npos);

  mock_->Clear();
  ASSERT_TRUE(RunUntil(io_, [&] { return rec_.cleared == 1; }));
}

TEST_F(AzureWatcherTest, OtherVmsAndFreezeAreIgnored) {
  StartWatcher(Provider());
  mock_->Preempt({.other_vm_only = true});
  RunFor(io_, 200ms);
  mock_->Preempt({.event_type = "Freeze"});
  RunFor(io_, 200ms);
  EXPECT_TRUE(rec_.notices.empty());
  mock_->Preempt({.event_type = "Terminate"});
  ASSERT_TRUE(RunUntil(io_, [&] { return !rec_.notices.empty(); }));
  EXPECT_EQ(rec_.notices[0].kind, "terminate");
}

TEST_F(AzureWatcherTest, ConfiguredNameAndTypes) {
  auto p = Provider();
  p.azure_vm_name = "TRAINER-7";  // Azure names compare case-insensitively
  p.azure_event_types = {"Freeze"};
  StartWatcher(p);
  mock_->Preempt({.event_type = "Freeze"});
  ASSERT_TRUE(RunUntil(io_, [&] { return !rec_.notices.empty(); }));
  EXPECT_EQ(mock_->requests_to("/metadata/instance/compute/name"), 0u);
  EXPECT_EQ(rec_.notices[0].kind, "freeze");
}

TEST_F(AzureWatcherTest, AcknowledgeStartsTheEventWhenConfigured) {
  auto p = Provider();
  p.azure_acknowledge = true;
  StartWatcher(p);
  mock_->Preempt();
  ASSERT_TRUE(RunUntil(io_, [&] { return !rec_.notices.empty(); }));
  watcher_->Acknowledge(rec_.notices[0]);
  ASSERT_TRUE(RunUntil(io_, [&] { return !mock_->acknowledged().empty(); }));
  EXPECT_EQ(mock_->acknowledged()[0], rec_.notices[0].id);
  // Started (NotBefore now empty) is the same event: no second notice, not cleared.
  RunFor(io_, 200ms);
  EXPECT_EQ(rec_.notices.size(), 1u);
  EXPECT_EQ(rec_.cleared, 0);
}

TEST_F(AzureWatcherTest, AcknowledgeIsANoOpUnlessConfigured) {
  StartWatcher(Provider());
  mock_->Preempt();
  ASSERT_TRUE(RunUntil(io_, [&] { return !rec_.notices.empty(); }));
  watcher_->Acknowledge(rec_.notices[0]);
  RunFor(io_, 200ms);
  EXPECT_TRUE(mock_->acknowledged().empty());
}

TEST(AzureThrottleTest, TooManyRequestsBacksOffAndIsLoggedOnce) {
  boost::asio::io_context io;
  mock::MockMetadataServer server(io, mock::MockProvider::kAzure, {.azure_rate_limit = 5});
  ASSERT_TRUE(server.Start().ok());
  auto p = FastProvider(ProviderKind::kAzure, server.url());
  p.poll_interval = 1ms;  // far over 5/s on purpose (azure_min_interval is 0 in tests)
  auto tuning = FastTuning();
  tuning.backoff_max = 400ms;
  testing::LogCapture logs;
  auto watcher = preemption::MakeWatcher(io, SystemClock(), p, tuning);
  ASSERT_TRUE(watcher.ok());
  Recorder rec;
  (*watcher)->Start(rec.OnNotice(), rec.OnCleared());
  server.Preempt();
  ASSERT_TRUE(RunUntil(
      io, [&] { return !rec.notices.empty(); }, 5s));
  RunFor(io, 1500ms);
  EXPECT_EQ(rec.notices.size(), 1u);
  EXPECT_GE(logs.Count("condition=throttled"), 1);
  // Backing off keeps it to a handful of requests per second after the first burst.
  EXPECT_LT(server.requests(), 60u);
}

TEST(AzureMinimumIntervalTest, PollsNoFasterThanOncePerSecondByDefault) {
  boost::asio::io_context io;
  mock::MockMetadataServer server(io, mock::MockProvider::kAzure, {});
  ASSERT_TRUE(server.Start().ok());
  auto p = FastProvider(ProviderKind::kAzure, server.url());
  p.azure_vm_name = "spotvisor-mock-vm";
  auto watcher = preemption::MakeWatcher(io, SystemClock(), p);  // production tuning: >= 1 s
  ASSERT_TRUE(watcher.ok());
  Recorder rec;
  (*watcher)->Start(rec.OnNotice(), rec.OnCleared());
  RunFor(io, 1500ms);
  EXPECT_EQ(server.requests_to(kEvents), 2u);
}

}  // namespace
}  // namespace spotvisor

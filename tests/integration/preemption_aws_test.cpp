// The AWS watcher against the in-process mock IMDS over loopback: the notice arrives once
// however many polls see it, carries action and time, clears on 404; IMDSv2 tokens are
// renewed before they expire; rebalance recommendations follow provider.rebalance; a
// rejected token with imdsv1_fallback uses plain GETs.
#include <gtest/gtest.h>

#include <boost/asio/io_context.hpp>

#include "integration/preemption_test_util.hpp"
#include "spotvisor/mock/mock_metadata_server.hpp"
#include "spotvisor/preemption/watcher.hpp"

namespace spotvisor {
namespace {

using namespace std::chrono_literals;
using config::ProviderKind;
using preemption::NoticeAction;
using testing::FastProvider;
using testing::FastTuning;
using testing::Recorder;
using testing::RunFor;
using testing::RunUntil;

class AwsWatcherTest : public ::testing::Test {
 protected:
  void StartMock(mock::MockOptions options = {}) {
    mock_ = std::make_unique<mock::MockMetadataServer>(io_, mock::MockProvider::kAws, options);
    ASSERT_TRUE(mock_->Start().ok());
  }
  void StartWatcher(config::ProviderSection p) {
    auto watcher = preemption::MakeWatcher(io_, SystemClock(), p, FastTuning());
    ASSERT_TRUE(watcher.ok()) << watcher.error().message;
    ASSERT_NE(watcher->get(), nullptr);
    watcher_ = std::move(*watcher);
    watcher_->Start(rec_.OnNotice(), rec_.OnCleared());
  }
  config::ProviderSection Provider() { return FastProvider(ProviderKind::kAws, mock_->url()); }

  boost::asio::io_context io_;
  std::unique_ptr<mock::MockMetadataServer> mock_;
  std::unique_ptr<preemption::Watcher> watcher_;
  Recorder rec_;
};

TEST_F(AwsWatcherTest, OneNoticePerInterruptionThenClearedOn404) {
  StartMock({.imdsv2_required = true});
  StartWatcher(Provider());
  ASSERT_TRUE(RunUntil(io_, [&] { return mock_->requests_to("/latest/meta-data/spot/instance-action") >= 3; }));
  EXPECT_TRUE(rec_.notices.empty());

  mock_->Preempt({.action = "terminate", .deadline_in = 120s});
  ASSERT_TRUE(RunUntil(io_, [&] { return !rec_.notices.empty(); }));
  const auto polls = mock_->requests_to("/latest/meta-data/spot/instance-action");
  ASSERT_TRUE(RunUntil(io_, [&] { return mock_->requests_to("/latest/meta-data/spot/instance-action") >= polls + 5; }));
  ASSERT_EQ(rec_.notices.size(), 1u);
  const auto& n = rec_.notices[0];
  EXPECT_EQ(n.provider, "aws");
  EXPECT_EQ(n.kind, "terminate");
  EXPECT_EQ(n.action, NoticeAction::kStop);
  ASSERT_TRUE(n.deadline.has_value());
  const auto left = *n.deadline - std::chrono::system_clock::now();
  EXPECT_GT(left, 100s);
  EXPECT_LT(left, 125s);
  EXPECT_NE(n.detail.find("terminate"), std::string::npos);
  EXPECT_EQ(rec_.cleared, 0);

  mock_->Clear();
  ASSERT_TRUE(RunUntil(io_, [&] { return rec_.cleared == 1; }));
  EXPECT_EQ(rec_.notices.size(), 1u);
}

TEST_F(AwsWatcherTest, StopActionIsReportedAsStop) {
  StartMock({.action = "stop"});
  StartWatcher(Provider());
  mock_->Preempt();
  ASSERT_TRUE(RunUntil(io_, [&] { return !rec_.notices.empty(); }));
  EXPECT_EQ(rec_.notices[0].kind, "stop");
}

TEST_F(AwsWatcherTest, NoticePresentAtStartIsSeenOnFirstPoll) {
  StartMock();
  mock_->Preempt();
  StartWatcher(Provider());
  ASSERT_TRUE(RunUntil(
      io_, [&] { return !rec_.notices.empty(); }, 2s));
  EXPECT_EQ(mock_->requests_to("/latest/meta-data/spot/instance-action"), 1u);
}

TEST_F(AwsWatcherTest, TokenIsRenewedBeforeItExpires) {
  StartMock({.imdsv2_required = true});
  auto p = Provider();
  p.token_ttl = 1s;  // renewed at 750 ms; the mock refuses it from 1 s on
  testing::LogCapture logs;
  StartWatcher(p);
  RunFor(io_, 2600ms);
  EXPECT_GE(mock_->requests_to("/latest/api/token"), 3u);
  EXPECT_LE(mock_->requests_to("/latest/api/token"), 5u);
  EXPECT_EQ(logs.Count("unauthorized"), 0);
  mock_->Preempt();
  ASSERT_TRUE(RunUntil(io_, [&] { return !rec_.notices.empty(); }));
}

TEST_F(AwsWatcherTest, RebalanceIsOneCheckpointPerRecommendation) {
  StartMock();
  StartWatcher(Provider());
  mock_->Preempt({.notice = false, .rebalance = true});
  ASSERT_TRUE(RunUntil(io_, [&] { return !rec_.notices.empty(); }));
  const auto polls = mock_->requests_to("/latest/meta-data/events/recommendations/rebalance");
  ASSERT_TRUE(RunUntil(
      io_, [&] { return mock_->requests_to("/latest/meta-data/events/recommendations/rebalance") >= polls + 5; }));
  ASSERT_EQ(rec_.notices.size(), 1u);
  EXPECT_EQ(rec_.notices[0].kind, "rebalance");
  EXPECT_EQ(rec_.notices[0].action, NoticeAction::kCheckpoint);

  // The interruption notice that follows is a separate, stop notice.
  mock_->Preempt({.notice = true, .rebalance = true});
  ASSERT_TRUE(RunUntil(io_, [&] { return rec_.notices.size() >= 2; }));
  RunFor(io_, 200ms);
  ASSERT_EQ(rec_.notices.size(), 2u);  // the same recommendation is not reported again
  EXPECT_EQ(rec_.notices[1].kind, "terminate");
  EXPECT_EQ(rec_.notices[1].action, NoticeAction::kStop);
}

TEST_F(AwsWatcherTest, RebalanceIgnoredWhenConfigured) {
  StartMock();
  auto p = Provider();
  p.rebalance = config::RebalanceAction::kIgnore;
  StartWatcher(p);
  mock_->Preempt({.notice = false, .rebalance = true});
  RunFor(io_, 300ms);
  EXPECT_TRUE(rec_.notices.empty());
  EXPECT_EQ(mock_->requests_to("/latest/meta-data/events/recommendations/rebalance"), 0u);
}

TEST_F(AwsWatcherTest, RebalanceAsStopWhenConfigured) {
  StartMock();
  auto p = Provider();
  p.rebalance = config::RebalanceAction::kStop;
  StartWatcher(p);
  mock_->Preempt({.notice = false, .rebalance = true});
  ASSERT_TRUE(RunUntil(io_, [&] { return !rec_.notices.empty(); }));
  EXPECT_EQ(rec_.notices[0].action, NoticeAction::kStop);
  mock_->Clear();
  ASSERT_TRUE(RunUntil(io_, [&] { return rec_.cleared == 1; }));
}

TEST_F(AwsWatcherTest, StopFromTheCallbackEndsEverything) {
  StartMock();
  mock_->Preempt();
  auto watcher = preemption::MakeWatcher(io_, SystemClock(), Provider(), FastTuning());
  ASSERT_TRUE(watcher.ok());
  int calls = 0;
  (*watcher)->Start(
      [&](const preemption::Notice&) {
        ++calls;
        watcher->reset();
      },
      [] {});
  ASSERT_TRUE(RunUntil(io_, [&] { return calls == 1; }));
  const auto before = mock_->requests();
  RunFor(io_, 200ms);
  EXPECT_EQ(mock_->requests(), before);
}

// A token endpoint that refuses (403, IMDSv2 off) or times out: plain GETs only with
// imdsv1_fallback; otherwise no request reaches the notice path at all.
TEST(AwsFallbackTest, ImdsV1OnlyWhenConfigured) {
  for (const bool fallback : {false, true}) {
    boost::asio::io_context io;
    testing::RawServer server(io, [](const std::string& head, const std::string&) {
      if (head.rfind("PUT /latest/api/token", 0) == 0) return testing::RawAction{.silent = true};
      if (head.find("x-aws-ec2-metadata-token:") != std::string::npos ||
          head.find("X-aws-ec2-metadata-token:") != std::string::npos) {
        return testing::RawAction{testing::HttpAnswer(401, "")};
      }
      if (head.rfind("GET /latest/meta-data/spot/instance-action", 0) == 0) {
        return testing::RawAction{
            testing::HttpAnswer(200, R"({"action": "terminate", "time": "2030-01-01T00:00:00Z"})")};
      }
      return testing::RawAction{testing::HttpAnswer(404, "<html>404</html>")};
    });
    testing::LogCapture logs;
    auto p = FastProvider(ProviderKind::kAws, server.url());
    p.imdsv1_fallback = fallback;
    p.request_timeout = 100ms;
    auto watcher = preemption::MakeWatcher(io, SystemClock(), p, FastTuning());
    ASSERT_TRUE(watcher.ok());
    Recorder rec;
    (*watcher)->Start(rec.OnNotice(), rec.OnCleared());
    if (fallback) {
      ASSERT_TRUE(RunUntil(
          io, [&] { return !rec.notices.empty(); }, 3s));
    } else {
      RunFor(io, 600ms);
      EXPECT_TRUE(rec.notices.empty());
      EXPECT_EQ(server.requests_to("/latest/meta-data"), 0);
    }
    EXPECT_EQ(logs.Count("hop limit"), 1) << "fallback=" << fallback;
  }
}

// A token the service stops accepting (an instance stop/start, a restarted IMDS) costs one
// fresh token and no missed poll; a service that refuses every token is not hammered: one
// fresh token per round, then the error backoff, said once.
TEST(AwsTokenTest, A401GetsOneFreshTokenThenBacksOff) {
  for (const bool refuse_all : {false, true}) {
    boost::asio::io_context io;
    int issued = 0;
    testing::RawServer server(io, [&](const std::string& head, const std::string&) {
      if (head.rfind("PUT /latest/api/token", 0) == 0) {
        ++issued;
        return testing::RawAction{
            testing::HttpAnswer(200, "tok-" + std::to_string(issued), {"X-aws-ec2-metadata-token-ttl-seconds: 21600"})};
      }
      const bool first_token = head.find("tok-1\r\n") != std::string::npos;
      if (refuse_all || first_token) return testing::RawAction{testing::HttpAnswer(401, "")};
      return testing::RawAction{testing::HttpAnswer(404, "<html>404 - Not Found</html>")};
    });
    testing::LogCapture logs;
    auto p = FastProvider(ProviderKind::kAws, server.url());
    auto tuning = FastTuning();
    tuning.backoff_max = 400ms;
    auto watcher = preemption::MakeWatcher(io, SystemClock(), p, tuning);
    ASSERT_TRUE(watcher.ok());
    Recorder rec;
    (*watcher)->Start(rec.OnNotice(), rec.OnCleared());
    const std::string probe = "/latest/meta-data/spot/instance-action";
    if (!refuse_all) {
      ASSERT_TRUE(RunUntil(
          io, [&] { return server.requests_to(probe) >= 6; }, 3s));
      EXPECT_EQ(issued, 2) << "one fresh token after the 401, then it is kept";
      EXPECT_EQ(logs.Count("even with a fresh token"), 0) << logs.Joined();
    } else {
      RunFor(io, 1200ms);
      // At the 20 ms poll interval without a backoff this would be ~60 rounds.
      EXPECT_GE(server.requests_to(probe), 2);
      EXPECT_LE(server.requests_to(probe), 2 * 8) << "each round: one probe, one fresh token, one more probe";
      EXPECT_LE(issued, server.requests_to(probe));
      EXPECT_EQ(logs.Count("even with a fresh token"), 1) << logs.Joined();
    }
    EXPECT_TRUE(rec.notices.empty());
  }
}

}  // namespace
}  // namespace spotvisor

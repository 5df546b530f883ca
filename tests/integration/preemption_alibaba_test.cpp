// The Alibaba watcher against the in-process mock: token in the aliyun headers, the
// termination time (plain ISO-8601) becomes the deadline, 404 clears.
#include <gtest/gtest.h>

#include <boost/asio/io_context.hpp>

#include "integration/preemption_test_util.hpp"
#include "spotvisor/mock/mock_metadata_server.hpp"
#include "spotvisor/preemption/watcher.hpp"

namespace spotvisor {
namespace {

using namespace std::chrono_literals;
using testing::Recorder;
using testing::RunFor;
using testing::RunUntil;

TEST(AlibabaWatcherTest, TerminationTimeIsOneNoticeAndClears) {
  boost::asio::io_context io;
  mock::MockMetadataServer server(io, mock::MockProvider::kAlibaba, {.imdsv2_required = true});
  ASSERT_TRUE(server.Start().ok());
  auto watcher = preemption::MakeWatcher(
      io, SystemClock(), testing::FastProvider(config::ProviderKind::kAlibaba, server.url()), testing::FastTuning());
  ASSERT_TRUE(watcher.ok());
  Recorder rec;
  (*watcher)->Start(rec.OnNotice(), rec.OnCleared());
  constexpr const char* kPath = "/latest/meta-data/instance/spot/termination-time";
  ASSERT_TRUE(RunUntil(io, [&] { return server.requests_to(kPath) >= 2; }));
  EXPECT_EQ(server.requests_to("/latest/api/token"), 1u);
  EXPECT_TRUE(rec.notices.empty());

  server.Preempt();
  ASSERT_TRUE(RunUntil(io, [&] { return !rec.notices.empty(); }));
  RunFor(io, 150ms);
  ASSERT_EQ(rec.notices.size(), 1u);
  EXPECT_EQ(rec.notices[0].provider, "alibaba");
  EXPECT_EQ(rec.notices[0].kind, "terminate");
  ASSERT_TRUE(rec.notices[0].deadline.has_value());
  const auto left = *rec.notices[0].deadline - std::chrono::system_clock::now();
  EXPECT_GT(left, 4min);
  EXPECT_LE(left, 5min);

  server.Clear();
  ASSERT_TRUE(RunUntil(io, [&] { return rec.cleared == 1; }));
}

}  // namespace
}  // namespace spotvisor

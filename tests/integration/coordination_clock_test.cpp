// The etcd coordinator in-process, against a real etcd member, in virtual time
// (support/virtual_clock.hpp): what it decides by its clock happens at exactly the virtual
// time the code says. Every etcd request holds the clock's BackgroundWork, so a request takes
// no virtual time; the watch's events do not, and these tests assert nothing that hangs on
// when an event arrives. Between two slices of virtual time the test changes etcd through a
// client of its own (real time, its own loop), while the coordinator's time stands still.
#include <gtest/gtest.h>

#include <boost/asio/io_context.hpp>
#include <chrono>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "integration/etcd_cluster.hpp"
#include "integration/etcd_test_util.hpp"
#include "spotvisor/coordination/etcd_coordinator.hpp"
#include "spotvisor/coordination/records.hpp"
#include "support/log_capture.hpp"
#include "support/virtual_clock.hpp"

namespace spotvisor::coordination {
namespace {

using namespace std::chrono_literals;
using testing::EtcdCluster;
using testing::VirtualClock;

const WallTime kWallStart{std::chrono::seconds(1'800'000'000)};

config::JobConfig Job(const EtcdCluster& cluster) {
  config::JobConfig job;
  job.job.name = "clock";
  job.coordination.etcd = cluster.ClientUrls();
  job.coordination.prefix = "/spotvisor-test";
  job.coordination.nodes = 1;
  job.coordination.node_rank = 0;
  job.coordination.advertise = "10.0.0.5";
  return job;
}

// Every log line with the virtual time it was logged at. Lives shorter than `log`.
class LineTimes {
 public:
  LineTimes(testing::LogCapture& log, const VirtualClock& clock) {
    log.OnLine([this, &clock](const std::string& line) {
      std::lock_guard lock(mu_);
      lines_.emplace_back(clock.elapsed(), line);
    });
  }
  // The times of the lines that contain `needle`.
  std::vector<Duration> Of(const std::string& needle) const {
    std::lock_guard lock(mu_);
    std::vector<Duration> out;
    for (const auto& [at, line] : lines_) {
      if (line.find(needle) != std::string::npos) out.push_back(at);
    }
    return out;
  }

 private:
  mutable std::mutex mu_;
  std::vector<std::pair<Duration, std::string>> lines_;
};

constexpr const char* kUnreachable = "event=group_trouble what=\"cannot reach etcd";
constexpr const char* kHeld = "event=group_trouble what=\"rank 0 is held by another node";
constexpr const char* kJoined = "event=group_joined rank=0";

// The coordinator of `job` on `clock`, started.
std::unique_ptr<supervisor::Coordinator> Started(boost::asio::io_context& io, VirtualClock& clock,
                                                 const config::JobConfig& job) {
  auto made = MakeEtcdCoordinator(io, clock, job);
  EXPECT_TRUE(made) << made.error().message;
  if (!made) return nullptr;
  (*made)->Start({[](const supervisor::StopRequestedEvent&) {}, [](supervisor::GroupSpareEvent) {}, [] {}});
  return std::move(*made);
}

// etcd away when the coordinator starts: it asks for a lease every kRetry (1 s), says so at
// once and then every kTroubleEvery (30 s) only, and joins at the first retry after etcd is
// back. Its member record carries the clock's wall time.
TEST(CoordinatorClock, EtcdAwayIsTriedEverySecondAndSaidEveryThirtySeconds) {
  EtcdCluster cluster(1);
  const auto job = Job(cluster);
  cluster.Kill(0);
  testing::LogCapture log;
  VirtualClock clock(kWallStart);
  LineTimes at(log, clock);
  boost::asio::io_context io;
  auto coordinator = Started(io, clock, job);
  ASSERT_TRUE(coordinator);

  clock.RunFor(io, 61500ms);  // 62 tries, 3 of them said
  EXPECT_EQ(at.Of(kUnreachable), (std::vector<Duration>{0s, 30s, 60s})) << log.Joined();
  EXPECT_TRUE(at.Of(kJoined).empty());
  cluster.Restart(0);  // real seconds; virtual time stands still meanwhile
  clock.RunFor(io, 2s);
  EXPECT_EQ(at.Of(kJoined), std::vector<Duration>{62s}) << log.Joined();

  boost::asio::io_context side_io;
  auto side = etcd::etcd_test::Connect(side_io, cluster.ClientUrls());
  auto member = etcd::etcd_test::Get(side_io, *side, MemberKey(GroupPrefix("/spotvisor-test", "clock"), 0));
  ASSERT_TRUE(member && member->kvs.size() == 1u);
  auto record = DecodeMember(member->kvs[0].value);
  ASSERT_TRUE(record) << record.error().message;
  EXPECT_EQ(record->since_unix_ms, UnixMillis(kWallStart));  // when it was made, on its clock
  EXPECT_NE(member->kvs[0].lease, 0);
  coordinator->Leave(false);
  etcd::etcd_test::RunUntil(
      io, [] { return false; }, 200ms);  // the revoke goes out
}

// A rank held by another node: the claim is tried again every kRetry and succeeds at the
// first try after the holder's key is gone. A stop it publishes carries a deadline of the
// clock's wall time plus the grace cap.
TEST(CoordinatorClock, AHeldRankIsClaimedAtTheFirstRetryAfterItIsFree) {
  EtcdCluster cluster(1);
  const auto job = Job(cluster);
  const std::string base = GroupPrefix("/spotvisor-test", "clock");
  boost::asio::io_context side_io;
  auto side = etcd::etcd_test::Connect(side_io, cluster.ClientUrls());
  ASSERT_TRUE(
      etcd::etcd_test::Put(side_io, *side, MemberKey(base, 0), Encode(MemberRecord{"10.0.0.9", "other", 4242, 1})));
  testing::LogCapture log;
  VirtualClock clock(kWallStart);
  LineTimes at(log, clock);
  boost::asio::io_context io;
  auto coordinator = Started(io, clock, job);
  ASSERT_TRUE(coordinator);

  clock.RunFor(io, 4500ms);  // tries at 0 .. 4 s
  ASSERT_FALSE(at.Of(kHeld).empty()) << log.Joined();
  EXPECT_EQ(at.Of(kHeld).front(), 0s);
  EXPECT_TRUE(at.Of(kJoined).empty());
  ASSERT_TRUE(etcd::etcd_test::Await<etcd::DeleteRangeResponse>(side_io, [&](auto done) {
    side->DeleteRange({MemberKey(base, 0), "", false}, std::move(done));
  }));
  clock.RunFor(io, 2s);
  EXPECT_EQ(at.Of(kJoined), std::vector<Duration>{5s}) << log.Joined();

  // The group of one agrees once its own join comes back through the watch (real time).
  std::optional<supervisor::GroupAgreedEvent> agreed;
  coordinator->Propose({{}, 1}, [&](supervisor::GroupAgreedEvent e) { agreed = std::move(e); });
  ASSERT_TRUE(etcd::etcd_test::RunUntil(io, [&] { return agreed.has_value(); })) << log.Joined();
  EXPECT_EQ(agreed->place.epoch, 1u);
  const std::int64_t now_ms = UnixMillis(clock.WallNow());
  EXPECT_EQ(now_ms, UnixMillis(kWallStart + 6500ms));
  coordinator->PublishStop({"notice: test", 90s, std::nullopt});
  std::optional<StopRecord> stop;
  ASSERT_TRUE(etcd::etcd_test::RunUntil(io, [&] {
    auto got = etcd::etcd_test::Get(side_io, *side, StopKey(base, 1));
    if (!got || got->kvs.size() != 1u) return false;
    auto decoded = DecodeStop(got->kvs[0].value);
    if (decoded) stop = *decoded;
    return stop.has_value();
  }));
  EXPECT_EQ(stop->deadline_unix_ms, now_ms + 90'000);
  coordinator->Leave(false);
  etcd::etcd_test::RunUntil(
      io, [] { return false; }, 200ms);
}

}  // namespace
}  // namespace spotvisor::coordination

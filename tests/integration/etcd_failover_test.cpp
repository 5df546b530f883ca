// The etcd client against three real etcd members on loopback (etcd_cluster.hpp): one
// member killed, a member cut off from its quorum; and one member behind two dead endpoints,
// gone and back.
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <boost/asio/io_context.hpp>
#include <chrono>
#include <optional>

#include "integration/etcd_cluster.hpp"
#include "integration/etcd_test_util.hpp"
#include "spotvisor/etcd/client.hpp"
#include "spotvisor/etcd/lease_keeper.hpp"
#include "spotvisor/etcd/watch.hpp"

namespace spotvisor::etcd {
namespace {

using namespace etcd_test;  // NOLINT(google-build-using-namespace): the tests' own helpers
using testing::EtcdCluster;

TEST(EtcdFailover, OneMemberKilledClientAndWatchGoOnThroughTheOthers) {
  EtcdCluster cluster(3);
  boost::asio::io_context io;
  // Long enough for an election when the killed member led the cluster.
  auto c = Connect(io, cluster.ClientUrls(), "", seconds(5));
  auto start = Put(io, *c, "/g/0", "before");
  ASSERT_TRUE(start) << start.error().message;
  Seen seen;
  Watch watch(*c, {"/g/", true, start->header.revision, false}, seen.Handlers());
  watch.Start();  // on member 0: it answered last
  ASSERT_TRUE(RunUntil(io, [&] { return seen.events.size() == 1; }));

  cluster.Kill(0);
  for (int i = 1; i <= 5; ++i) {
    auto put = Put(io, *c, "/g/" + std::to_string(i), "during");
    ASSERT_TRUE(put) << put.error().message;
  }
  TxnRequest txn;
  txn.compare.push_back(Compare::Absent("/g/stop"));
  txn.success.emplace_back(PutRequest{"/g/stop", "node-1"});
  auto stop = Await<TxnResponse>(io, [&](auto done) { c->Txn(txn, done); });
  ASSERT_TRUE(stop) << stop.error().message;
  EXPECT_TRUE(stop->succeeded);
  ASSERT_TRUE(RunUntil(io, [&] { return seen.events.size() == 7; })) << seen.events.size();
  for (std::size_t i = 1; i < seen.events.size(); ++i) {
    EXPECT_EQ(seen.events[i].kv.mod_revision, seen.events[i - 1].kv.mod_revision + 1);
  }
  EXPECT_EQ(seen.events.back().kv.key, "/g/stop");
  EXPECT_GE(seen.losses, 1);
  EXPECT_GE(seen.connects, 2);
  auto lease = Await<LeaseGrantResponse>(io, [&](auto done) { c->LeaseGrant(2, done); });
  ASSERT_TRUE(lease) << lease.error().message;

  // The member comes back and catches up.
  cluster.Restart(0);
  auto back = Client::Create(io, SystemClock(), {{cluster.ClientUrl(0)}, "", seconds(2)});
  ASSERT_TRUE(back);
  ASSERT_TRUE(RunUntil(io, [&] {
    auto r = Get(io, **back, "/g/stop");
    return r && r->kvs.size() == 1;
  }));
}

TEST(EtcdFailover, AWatchOnAMemberThatLostQuorumEndsAndIsReportedNotSilent) {
  EtcdCluster cluster(3);
  boost::asio::io_context io;
  auto c = Connect(io, {cluster.ClientUrl(0)});
  std::vector<std::string> losses;
  int connects = 0;
  Watch watch(*c, {"/q/", true, 0, false},
              {[](const std::vector<Event>&) {}, nullptr,
               [&](bool up, const std::string& why) {
                 if (up) ++connects;
                 if (!up) losses.push_back(why);
               }});
  watch.Start();
  ASSERT_TRUE(RunUntil(io, [&] { return connects == 1; }));
  cluster.Kill(1);
  cluster.Kill(2);
  // Grpc-Metadata-hasleader: the member ends the stream once it has had no leader for a few
  // election timeouts (etcd#10819), and refuses to open it again.
  ASSERT_TRUE(RunUntil(
      io, [&] { return !losses.empty(); }, seconds(10)));
  // (The gateway ends the chunked body without saying why.) Without the header the stream
  // would stay open and silent for as long as the member is cut off.
  EXPECT_EQ(losses.front(), "POST " + cluster.ClientUrl(0) + "/v3/watch: the server ended the stream");
  EXPECT_EQ(connects, 1);
}

TEST(EtcdFailover, AllMembersGoneIsAClearErrorWithinTheDeadlineThenRecovery) {
  EtcdCluster cluster(1);
  boost::asio::io_context io;
  // Two endpoints where nothing listens around the one member.
  const std::string dead1 = "http://127.0.0.1:" + std::to_string(testing::FreeLoopbackPort());
  const std::string dead2 = "http://127.0.0.1:" + std::to_string(testing::FreeLoopbackPort());
  auto c = Connect(io, {dead1, cluster.ClientUrl(0), dead2}, "", seconds(2));
  ASSERT_TRUE(Put(io, *c, "/r/a", "1"));
  auto lease = Await<LeaseGrantResponse>(io, [&](auto done) { c->LeaseGrant(2, done); });
  ASSERT_TRUE(lease);
  std::optional<Error> lost;
  LeaseKeeper keeper(*c, lease->id, lease->ttl, [&](Error e) { lost = e; });
  keeper.Start();

  cluster.Kill(0);
  const auto killed = Clock::now();
  const auto t0 = Clock::now();
  auto failed = Get(io, *c, "/r/a");
  // Refused endpoints fail at once: well under one 2 s request timeout per endpoint (6 s).
  EXPECT_LE(Clock::now() - t0, seconds(4));
  ASSERT_FALSE(failed);
  const std::string& why = failed.error().message;
  EXPECT_EQ(why.rfind("etcd read key /r/a: no endpoint answered (", 0), 0U) << why;
  for (const auto& url : {dead1, cluster.ClientUrl(0), dead2}) {
    EXPECT_NE(why.find(url + ": refused"), std::string::npos) << why;
  }
  // The keeper gives the lease up once its TTL has run out with no member answering.
  ASSERT_TRUE(RunUntil(
      io, [&] { return lost.has_value(); }, seconds(5)));
  EXPECT_LE(Clock::now() - killed, seconds(4));  // the 2 s TTL, with room for a loaded machine
  EXPECT_NE(lost->message.find("no etcd member answered a keepalive before its TTL ran out"), std::string::npos)
      << lost->message;

  cluster.Restart(0);
  auto again = Get(io, *c, "/r/a");
  ASSERT_TRUE(again) << again.error().message;
  EXPECT_EQ(again->kvs.at(0).value, "1");
}

}  // namespace
}  // namespace spotvisor::etcd

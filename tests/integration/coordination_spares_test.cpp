// Hot spares (coordination.spares), three etcd coordinators in-process against a real etcd
// member: a node that finds every rank held waits as a spare (its key in etcd, the Fsm
// told), takes a rank the moment its holder gives it up (not at the next retry), and is
// told to select again, since the checkpoints it proposed from may be old; the group then
// agrees with it in the lost node's place. The node that gave its rank up, proposing again
// (its notice cleared), waits as a spare in turn, and takes the rank of a node whose lease
// ends.
#include <gtest/gtest.h>

#include <boost/asio/io_context.hpp>
#include <chrono>
#include <optional>
#include <string>
#include <vector>

#include "integration/coordination_node.hpp"
#include "integration/etcd_cluster.hpp"
#include "integration/etcd_test_util.hpp"
#include "spotvisor/coordination/etcd_coordinator.hpp"
#include "spotvisor/coordination/records.hpp"
#include "support/log_capture.hpp"
#include "support/virtual_clock.hpp"

namespace spotvisor::coordination {
namespace {

using namespace std::chrono_literals;
using etcd::etcd_test::RunUntil;
using testing::Count;
using testing::EtcdCluster;
using testing::Node;
using testing::VirtualClock;

config::JobConfig Job(const EtcdCluster& cluster, const std::string& advertise) {
  auto job = testing::GroupJob(cluster, "spares", advertise, 2);
  job.coordination.spares = 1;
  return job;
}

TEST(CoordinationSpares, ASpareTakesALostRankAtOnceSelectsAgainAndTheGroupAgreesWithIt) {
  EtcdCluster cluster(1);
  testing::LogCapture log;
  VirtualClock clock(WallTime{std::chrono::seconds(1'800'000'000)});
  boost::asio::io_context io;
  boost::asio::io_context side_io;
  auto side = etcd::etcd_test::Connect(side_io, cluster.ClientUrls());
  const std::string base = GroupPrefix("/spotvisor-test", "spares");
  const auto view = [&] {
    auto got = etcd::etcd_test::Get(side_io, *side, base, /*prefix=*/true);
    std::vector<KeyValueText> pairs;
    if (got) {
      for (const auto& kv : got->kvs) pairs.push_back({kv.key, kv.value});
    }
    return ReadView(base, pairs);
  };

  Node a{Job(cluster, "10.0.0.1")}, b{Job(cluster, "10.0.0.2")}, s{Job(cluster, "10.0.0.3")};
  a.Start(io, clock);
  ASSERT_TRUE(RunUntil(io, [&] { return log.Joined().find("event=group_joined rank=0") != std::string::npos; }))
      << log.Joined();
  b.Start(io, clock);
  ASSERT_TRUE(RunUntil(io, [&] { return log.Joined().find("event=group_joined rank=1") != std::string::npos; }))
      << log.Joined();
  a.Propose(20);
  b.Propose(20);
  ASSERT_TRUE(RunUntil(io, [&] { return a.agreed && b.agreed; })) << log.Joined();
  EXPECT_EQ(a.agreed->place.epoch, 1u);

  // The third node: every rank is held, it waits as a spare, said once (not a trouble).
  s.Start(io, clock);
  s.Propose(20);
  ASSERT_TRUE(RunUntil(io, [&] { return !s.spare_events.empty() && view().spares.size() == 1u; })) << log.Joined();
  EXPECT_EQ(s.spare_events, std::vector<bool>{true});
  EXPECT_EQ(view().spares.begin()->second.advertise, "10.0.0.3");
  clock.RunFor(io, 5s);  // its retries find nothing free and say nothing more
  EXPECT_EQ(Count(log.Joined(), "event=spare_waiting"), 1u) << log.Joined();
  EXPECT_EQ(Count(log.Joined(), "event=group_trouble"), 0u) << log.Joined();
  EXPECT_EQ(Count(log.Joined(), "event=spares_beyond_config"), 0u) << log.Joined();
  EXPECT_FALSE(s.agreed);

  // Node 0 is drained (a notice): it gives its rank up; the spare takes it at once, with no
  // virtual time passing (the watch's delete, not a retry), and is told to select again.
  a.coordinator->ReleaseRank();
  ASSERT_TRUE(RunUntil(io, [&] { return s.spare_events.size() == 2u; })) << log.Joined();
  EXPECT_EQ(s.spare_events, (std::vector<bool>{true, false}));
  EXPECT_NE(log.Joined().find("event=group_rank_released rank=0"), std::string::npos) << log.Joined();
  EXPECT_NE(log.Joined().find("event=group_joined rank=0 nodes=2 advertise=10.0.0.3"), std::string::npos)
      << log.Joined();
  EXPECT_NE(log.Joined().find("from=spare"), std::string::npos) << log.Joined();
  EXPECT_TRUE(RunUntil(io, [&] { return view().spares.empty(); }));
  EXPECT_EQ(view().members.at(0).advertise, "10.0.0.3");
  EXPECT_FALSE(s.agreed) << "the old proposal was dropped";

  // The spare's new selection found the lost node's last save; the survivor proposes too.
  s.Propose(30);
  b.Propose(30);
  ASSERT_TRUE(RunUntil(io, [&] { return s.agreed && b.agreed; })) << log.Joined();
  EXPECT_EQ(s.agreed->place.epoch, 2u);
  EXPECT_EQ(s.agreed->place.rank, 0);
  EXPECT_EQ(b.agreed->place.master_addr, "10.0.0.3") << "rank 0's address is the spare's now";
  ASSERT_TRUE(s.agreed->point);
  EXPECT_EQ(s.agreed->point->step, 30u);
  EXPECT_FALSE(a.agreed && a.agreed->place.epoch == 2u);

  // Node 0's notice cleared: it proposes again and, every rank held, waits as a spare.
  a.Propose(30);
  ASSERT_TRUE(RunUntil(io, [&] { return !a.spare_events.empty() && view().spares.size() == 1u; })) << log.Joined();
  EXPECT_EQ(a.spare_events, std::vector<bool>{true});
  EXPECT_EQ(view().spares.begin()->second.advertise, "10.0.0.1");

  // Node 1 vanishes (its lease ends: here revoked, as etcd does when it lapses): the spare
  // takes rank 1 on the delete.
  b.coordinator->Leave(false);
  ASSERT_TRUE(RunUntil(io, [&] { return a.spare_events.size() == 2u; })) << log.Joined();
  EXPECT_EQ(a.spare_events, (std::vector<bool>{true, false}));
  EXPECT_TRUE(RunUntil(io, [&] {
    const auto v = view();
    return v.spares.empty() && v.members.count(1) && v.members.at(1).advertise == "10.0.0.1";
  }));

  for (Node* n : {&a, &s}) n->coordinator->Leave(false);
  RunUntil(
      io, [] { return false; }, 300ms);
}

// The job ends while a spare waits: the nodes that finished leave (done first, then their
// member key), which is no lost rank, so the spare never takes one; once every rank is done
// it is told, once, and ends with the job (a Job's pods all end: none waits forever).
TEST(CoordinationSpares, ASpareEndsWithTheJobAndTakesNoRankOfANodeThatFinished) {
  EtcdCluster cluster(1);
  testing::LogCapture log;
  boost::asio::io_context io;
  Node a{Job(cluster, "10.0.0.1")}, b{Job(cluster, "10.0.0.2")}, s{Job(cluster, "10.0.0.3")};
  a.Start(io, SystemClock());
  ASSERT_TRUE(RunUntil(io, [&] { return log.Joined().find("event=group_joined rank=0") != std::string::npos; }));
  b.Start(io, SystemClock());
  ASSERT_TRUE(RunUntil(io, [&] { return log.Joined().find("event=group_joined rank=1") != std::string::npos; }));
  a.Propose(20);
  b.Propose(20);
  ASSERT_TRUE(RunUntil(io, [&] { return a.agreed && b.agreed; })) << log.Joined();
  s.Start(io, SystemClock());
  s.Propose(20);
  ASSERT_TRUE(RunUntil(io, [&] { return !s.spare_events.empty(); })) << log.Joined();

  bool a_done = false;
  a.coordinator->PublishDone([&] { a_done = true; });
  a.coordinator->Leave(true);
  RunUntil(
      io, [] { return false; }, 1500ms);  // the spare's retries see rank 0 free: it must not take it
  EXPECT_EQ(s.finished, 0) << "rank 1 has not finished";
  EXPECT_EQ(log.Joined().find("advertise=10.0.0.3"), std::string::npos) << log.Joined();
  b.coordinator->PublishDone([] {});
  b.coordinator->Leave(true);
  ASSERT_TRUE(RunUntil(io, [&] { return s.finished == 1; })) << log.Joined();
  EXPECT_NE(log.Joined().find("event=spare_done epoch=1"), std::string::npos) << log.Joined();
  EXPECT_EQ(log.Joined().find("advertise=10.0.0.3"), std::string::npos) << log.Joined();
  s.coordinator->Leave(false);
  RunUntil(
      io, [] { return false; }, 300ms);
  EXPECT_EQ(s.finished, 1);
}

// Fencing: node 0 reaches etcd only through member 0, the others through members 1 and 2.
// Member 0 dies: node 0's lease lapses while its trainer runs (the cut-off handler is told,
// so the driver judges the trainer), etcd ends the lease, the spare takes rank 0 and the
// survivor stops for the lost rank. Member 0 comes back: node 0 finds its rank held by the
// spare, stops its trainer at once (never a second trainer of rank 0) and, proposing again,
// waits as a spare. Real time: etcd's lease lapses on its own clock.
TEST(CoordinationFencing, ARankTakenWhileCutOffStopsItsTrainerAndTheNodeWaitsAsASpare) {
  EtcdCluster cluster(3);
  testing::LogCapture log;
  boost::asio::io_context io;
  Node a{Job(cluster, "10.0.0.1")}, b{Job(cluster, "10.0.0.2")}, s{Job(cluster, "10.0.0.3")};
  a.job.coordination.etcd = {cluster.ClientUrl(0)};
  for (Node* n : {&b, &s}) n->job.coordination.etcd = {cluster.ClientUrl(1), cluster.ClientUrl(2)};
  for (Node* n : {&a, &b, &s}) n->job.coordination.lease_ttl = 3s;

  a.Start(io, SystemClock());
  ASSERT_TRUE(RunUntil(io, [&] { return log.Joined().find("event=group_joined rank=0") != std::string::npos; }))
      << log.Joined();
  b.Start(io, SystemClock());
  ASSERT_TRUE(RunUntil(io, [&] { return log.Joined().find("event=group_joined rank=1") != std::string::npos; }))
      << log.Joined();
  a.Propose(20);
  b.Propose(20);
  ASSERT_TRUE(RunUntil(io, [&] { return a.agreed && b.agreed; })) << log.Joined();
  s.Start(io, SystemClock());
  s.Propose(20);
  ASSERT_TRUE(RunUntil(io, [&] { return !s.spare_events.empty(); })) << log.Joined();

  cluster.Kill(0);
  ASSERT_TRUE(RunUntil(
      io, [&] { return a.cut_offs == 1; }, 15s))
      << log.Joined();
  EXPECT_NE(log.Joined().find("event=group_lease_lost rank=0"), std::string::npos) << log.Joined();
  ASSERT_TRUE(RunUntil(
      io, [&] { return s.spare_events.size() == 2u; }, 15s))
      << log.Joined();
  EXPECT_NE(log.Joined().find("event=group_joined rank=0 nodes=2 advertise=10.0.0.3"), std::string::npos)
      << log.Joined();
  ASSERT_TRUE(RunUntil(io, [&] { return !b.stops.empty(); })) << log.Joined();
  EXPECT_TRUE(a.stops.empty()) << "cut off, node 0 hears nothing; its own trainer is judged by the driver";

  cluster.Restart(0);
  ASSERT_TRUE(RunUntil(
      io, [&] { return !a.stops.empty(); }, 20s))
      << log.Joined();
  ASSERT_EQ(a.stops.size(), 1u);
  EXPECT_EQ(a.stops[0].rfind("rank 0 was taken by ", 0), 0u) << a.stops[0];
  EXPECT_NE(a.stops[0].find("(10.0.0.3) while this node was cut off"), std::string::npos) << a.stops[0];
  EXPECT_NE(log.Joined().find("event=group_rank_taken rank=0"), std::string::npos) << log.Joined();
  EXPECT_EQ(a.cut_offs, 1);

  // Its next proposal finds every rank held: it waits as a spare, with no second claim on 0.
  a.Propose(30);
  ASSERT_TRUE(RunUntil(
      io, [&] { return !a.spare_events.empty(); }, 15s))
      << log.Joined();
  EXPECT_EQ(a.spare_events, std::vector<bool>{true});
  EXPECT_EQ(Count(log.Joined(), "event=group_joined rank=0 nodes=2 advertise=10.0.0.1"), 1u) << log.Joined();

  for (Node* n : {&a, &b, &s}) n->coordinator->Leave(false);
  RunUntil(
      io, [] { return false; }, 300ms);
}

}  // namespace
}  // namespace spotvisor::coordination

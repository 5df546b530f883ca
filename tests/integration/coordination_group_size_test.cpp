// A group that shrinks and grows back (coordination.min_nodes, shrink_after), three and four
// etcd coordinators in-process against a real etcd member, in virtual time: a lost rank that
// nobody takes within shrink_after lets the survivors start with fewer nodes, renumbered
// 0..n-1 in rank order, the lowest rank's node the master; a node that comes later stops the
// shrunken group (a checkpoint, then a restart), waits for that checkpoint and selects again,
// and the group starts whole with it. A replacement that
// joins before shrink_after is up makes no shrink, and fewer than min_nodes wait.
#include <gtest/gtest.h>

#include <boost/asio/io_context.hpp>
#include <chrono>
#include <string>
#include <utility>

#include "integration/coordination_node.hpp"
#include "integration/etcd_cluster.hpp"
#include "integration/etcd_test_util.hpp"
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
  auto job = testing::GroupJob(cluster, "shrink", advertise, 3);
  job.coordination.min_nodes = 2;
  job.coordination.shrink_after = 10s;
  return job;
}

struct GroupSize : ::testing::Test {
  EtcdCluster cluster{1};
  testing::LogCapture log;
  VirtualClock clock{WallTime{std::chrono::seconds(1'800'000'000)}};
  boost::asio::io_context io;

  // Starts `nodes` in order, each claiming the next rank.
  void Join(std::initializer_list<Node*> nodes) {
    for (Node* n : nodes) {
      const auto joined = Count(log.Joined(), "event=group_joined");
      n->Start(io, clock);
      ASSERT_TRUE(RunUntil(io, [&] { return Count(log.Joined(), "event=group_joined") == joined + 1; }))
          << log.Joined();
    }
  }
  // Waits, virtual time standing still, until each of `ranks` said that it counts shrink_after
  // from now, with exactly `joined` in `epoch`. A node starts counting when its watch brings
  // the last join, an event that holds no virtual time back (clock.RunFor waits for requests
  // only): virtual time moved on before it came would move the shrink as far.
  bool CountingShrinkAfter(std::initializer_list<int> ranks, std::uint64_t epoch, const std::string& joined) {
    return RunUntil(io, [&] {
      const std::string text = log.Joined();
      for (int r : ranks) {
        const std::string line = "event=group_shrink_pending rank=" + std::to_string(r) +
                                 " epoch=" + std::to_string(epoch) + " joined=" + joined + " shrink_in=10s";
        if (text.find(line) == std::string::npos) return false;
      }
      return true;
    });
  }
  // Virtual timers due now run too (a shrink decided at once), no time passes.
  bool Agreed(std::initializer_list<Node*> nodes) {
    return RunUntil(io, [&] {
      clock.RunFor(io, 0ms);
      for (Node* n : nodes)
        if (!n->agreed) return false;
      return true;
    });
  }
  void TearDown() override {
    RunUntil(
        io, [] { return false; }, 300ms);
  }
};

TEST_F(GroupSize, ALostRankNobodyTakesShrinksTheGroupRenumberedAndANewcomerGrowsItBack) {
  Node a{Job(cluster, "10.0.0.1")}, b{Job(cluster, "10.0.0.2")}, c{Job(cluster, "10.0.0.3")};
  Join({&a, &b, &c});
  for (Node* n : {&a, &b, &c}) n->Propose(20);
  ASSERT_TRUE(Agreed({&a, &b, &c})) << log.Joined();
  EXPECT_EQ(b.agreed->place.world, 3);

  // Rank 0 is lost. The survivors stop and wait; nobody comes for 10 s.
  a.coordinator->Leave(false);
  ASSERT_TRUE(RunUntil(io, [&] { return !b.stops.empty() && !c.stops.empty(); })) << log.Joined();
  b.Propose(30);
  c.Propose(30);
  ASSERT_TRUE(CountingShrinkAfter({1, 2}, 2, "1,2")) << log.Joined();
  clock.RunFor(io, 9s);
  EXPECT_FALSE(b.agreed || c.agreed) << "shrink_after is 10 s";
  EXPECT_EQ(Count(log.Joined(), "event=group_shrinking"), 0u) << log.Joined();
  clock.RunFor(io, 2s);
  ASSERT_TRUE(Agreed({&b, &c})) << log.Joined();
  EXPECT_EQ(Count(log.Joined(), "event=group_shrinking"), 1u) << "written once, by the first node" << log.Joined();
  EXPECT_NE(log.Joined().find("nodes=2 of=3 ranks=1,2 missing=0"), std::string::npos) << log.Joined();
  EXPECT_EQ(b.agreed->place.epoch, 2u);
  EXPECT_EQ(b.agreed->place.world, 2);
  EXPECT_EQ(b.agreed->place.rank, 0) << "rank 1 trains as place 0";
  EXPECT_EQ(c.agreed->place.rank, 1);
  EXPECT_EQ(c.agreed->place.master_addr, "10.0.0.2") << "the lowest rank's node is the master";
  ASSERT_TRUE(b.agreed->point);
  EXPECT_EQ(b.agreed->point->step, 30u);

  // A trainer of the shrunken group fails: the group starts again at once, shrunken as
  // before (rank 0 is still gone; waiting shrink_after again would only idle it).
  c.coordinator->PublishStop({"trainer failed: exit code 1", std::nullopt, 1});
  ASSERT_TRUE(RunUntil(io, [&] { return b.stops.size() == 2u; })) << log.Joined();
  b.Propose(35);
  c.Propose(35);
  ASSERT_TRUE(Agreed({&b, &c})) << log.Joined();
  EXPECT_EQ((std::pair{b.agreed->place.epoch, b.agreed->place.world}), (std::pair{std::uint64_t{3}, 2}));
  EXPECT_EQ(Count(log.Joined(), "event=group_shrinking"), 2u) << log.Joined();

  // A new node takes rank 0 and, once it has selected, asks to join: the shrunken group is
  // told it grows (each node's Fsm stops its trainer at a checkpoint: at once if it saves on
  // the signal). The newcomer's proposal predates that save, so it waits, as a spare does,
  // until the group regroups, then selects again; the group starts with three, the newcomer
  // as rank 0 and master.
  Node d{Job(cluster, "10.0.0.4")};
  Join({&d});
  clock.RunFor(io, 3s);
  EXPECT_EQ(b.grows.size(), 0u) << "a claim alone grows nothing: the newcomer may still be selecting";
  d.Propose(30);
  ASSERT_TRUE(RunUntil(io, [&] { return b.grows.size() == 1u && c.grows.size() == 1u; })) << log.Joined();
  EXPECT_NE(b.grows[0].find("node 0: joined the shrunken group"), std::string::npos) << b.grows[0];
  EXPECT_EQ((std::pair{b.stops.size(), c.stops.size()}), (std::pair{std::size_t{2}, std::size_t{1}}))
      << "the growth is no stop: the Fsm decides when the trainer stops";
  EXPECT_NE(log.Joined().find("event=group_growing epoch=3 nodes=2 of=3 joined_rank=0"), std::string::npos)
      << log.Joined();
  ASSERT_TRUE(RunUntil(io, [&] { return d.spare_events == std::vector<bool>{true}; })) << log.Joined();
  EXPECT_NE(log.Joined().find("event=group_grow_waiting rank=0 epoch=3 nodes=2 of=3"), std::string::npos)
      << log.Joined();
  b.Propose(40);
  ASSERT_TRUE(RunUntil(io, [&] { return d.spare_events == std::vector<bool>{true, false}; })) << log.Joined();
  c.Propose(40);
  d.Propose(40);  // selected again: the group's save is there now
  ASSERT_TRUE(Agreed({&b, &c, &d})) << log.Joined();
  EXPECT_EQ(d.agreed->place.epoch, 4u);
  for (Node* n : {&b, &c, &d}) EXPECT_EQ(n->agreed->place.world, 3);
  EXPECT_EQ(b.agreed->place.rank, 1) << "whole again: places are ranks";
  EXPECT_EQ(b.agreed->place.master_addr, "10.0.0.4");
  ASSERT_TRUE(d.agreed->point);
  EXPECT_EQ(d.agreed->point->step, 40u) << "the step the shrunken group saved when it stopped";
  EXPECT_EQ(Count(log.Joined(), "event=group_shrinking"), 2u) << log.Joined();

  for (Node* n : {&b, &c, &d}) n->coordinator->Leave(false);
}

TEST_F(GroupSize, AReplacementWithinShrinkAfterKeepsTheGroupWholeAndTooFewWait) {
  Node a{Job(cluster, "10.0.0.1")}, b{Job(cluster, "10.0.0.2")}, c{Job(cluster, "10.0.0.3")};
  Join({&a, &b, &c});
  for (Node* n : {&a, &b, &c}) n->Propose(20);
  ASSERT_TRUE(Agreed({&a, &b, &c})) << log.Joined();

  c.coordinator->Leave(false);
  ASSERT_TRUE(RunUntil(io, [&] { return !a.stops.empty() && !b.stops.empty(); })) << log.Joined();
  a.Propose(20);
  b.Propose(20);
  ASSERT_TRUE(CountingShrinkAfter({0, 1}, 2, "0,1")) << log.Joined();
  clock.RunFor(io, 8s);
  Node r{Job(cluster, "10.0.0.5")};
  Join({&r});
  r.Propose(20);
  ASSERT_TRUE(Agreed({&a, &b, &r})) << log.Joined();
  EXPECT_EQ(r.agreed->place.world, 3);
  EXPECT_EQ(r.agreed->place.rank, 2);
  clock.RunFor(io, 5s);
  EXPECT_EQ(Count(log.Joined(), "event=group_shrinking"), 0u) << log.Joined();

  // Two lost at once: one survivor is fewer than min_nodes 2; it waits, and says why.
  a.coordinator->Leave(false);
  r.coordinator->Leave(false);
  ASSERT_TRUE(RunUntil(io, [&] { return b.stops.size() == 2u; })) << log.Joined();
  b.Propose(20);
  ASSERT_TRUE(CountingShrinkAfter({1}, 3, "1")) << log.Joined();
  clock.RunFor(io, 60s);
  EXPECT_FALSE(b.agreed);
  EXPECT_NE(log.Joined().find("event=group_too_small epoch=3 joined=1 min_nodes=2"), std::string::npos) << log.Joined();
  b.coordinator->Leave(false);
}

}  // namespace
}  // namespace spotvisor::coordination

// The group's decisions without etcd: the GroupFsm driven by events, its actions read back
// by name. The table at the end holds every seat and course a node can be in against every
// event; the scenarios before it play several nodes against one key-value map in virtual
// time (no etcd, nothing sleeps).
#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <set>

#include "spotvisor/coordination/group_fsm.hpp"

namespace spotvisor::coordination {
namespace {

using std::chrono::milliseconds;
using std::chrono::seconds;
using supervisor::ProposeResumeAction;

const std::string kBase = "/t/job/";

config::CoordinationSection Group(int nodes, int spares, int min_nodes) {
  config::CoordinationSection c;
  c.etcd = {"http://127.0.0.1:2379"};
  c.nodes = nodes;
  c.spares = spares;
  c.min_nodes = min_nodes;
  c.shrink_after = seconds(60);
  c.prefix = "/t";
  c.advertise = "10.0.0.1";
  return c;
}

MemberRecord Me(const std::string& addr, std::int64_t pid) { return MemberRecord{addr, "host-" + addr, pid, 1000}; }

// A key without the job's prefix, as the table shows it.
std::string Short(const std::string& key) { return key.rfind(kBase, 0) == 0 ? key.substr(kBase.size()) : key; }

std::string RequestName(const std::variant<etcd::PutRequest, etcd::DeleteRangeRequest, etcd::TxnRequest>& r) {
  if (const auto* put = std::get_if<etcd::PutRequest>(&r)) return "put " + Short(put->key);
  if (const auto* del = std::get_if<etcd::DeleteRangeRequest>(&r)) return "delete " + Short(del->key);
  const auto& txn = std::get<etcd::TxnRequest>(r);
  const auto& op = txn.success.front();
  if (const auto* put = std::get_if<etcd::PutRequest>(&op)) return "txn put " + Short(put->key);
  return "txn delete " + Short(std::get<etcd::DeleteRangeRequest>(op).key);
}

// The event name of a log line ("event=group_agreed ..." → "group_agreed").
std::string EventOf(const std::string& line) {
  const auto start = line.find("event=") + 6;
  return line.substr(start, line.find(' ', start) - start);
}

// Each action by a short name: what it asks for and of which key, timer or handler.
std::string Name(const GroupAction& action) {
  return std::visit(
      [](const auto& a) -> std::string {
        using T = std::decay_t<decltype(a)>;
        if constexpr (std::is_same_v<T, GrantLeaseAction>) return "grant lease";
        if constexpr (std::is_same_v<T, KeepLeaseAction>) return "keep lease";
        if constexpr (std::is_same_v<T, DropLeaseAction>) return "drop lease";
        if constexpr (std::is_same_v<T, WatchGroupAction>) return "watch";
        if constexpr (std::is_same_v<T, ClaimAction>) return "claim " + std::to_string(a.rank);
        if constexpr (std::is_same_v<T, PutJoinAction>) return "join " + std::to_string(a.epoch);
        if constexpr (std::is_same_v<T, PutDoneAction>) return "done " + std::to_string(a.epoch);
        if constexpr (std::is_same_v<T, PublishStopTxnAction>) return "stop " + std::to_string(a.epoch);
        if constexpr (std::is_same_v<T, ShrinkAction>) return "shrink " + std::to_string(a.epoch);
        if constexpr (std::is_same_v<T, RaiseFailuresAction>) return "failures " + std::to_string(a.count);
        if constexpr (std::is_same_v<T, WriteAction>) return RequestName(a.request);
        if constexpr (std::is_same_v<T, CloseAction>)
          return std::string("close") + (a.done ? " after " + Short(a.done->key) : "") + (a.lease ? ", revoke" : "");
        if constexpr (std::is_same_v<T, ArmGroupTimerAction>) return std::string("arm ") + GroupTimerName(a.timer);
        if constexpr (std::is_same_v<T, CancelGroupTimerAction>)
          return std::string("cancel ") + GroupTimerName(a.timer);
        if constexpr (std::is_same_v<T, TellAgreedAction>) return "tell agreed";
        if constexpr (std::is_same_v<T, TellPeerStopAction>) return "tell peer stop";
        if constexpr (std::is_same_v<T, TellSpareAction>) return a.waiting ? "tell spare" : "tell select again";
        if constexpr (std::is_same_v<T, TellGrowAction>) return "tell grow";
        if constexpr (std::is_same_v<T, TellCutOffAction>) return "tell cut off";
        if constexpr (std::is_same_v<T, TellFinishedAction>) return "tell finished";
        if constexpr (std::is_same_v<T, TellSpareFinishedAction>) return "tell job done";
        if constexpr (std::is_same_v<T, supervisor::LogAction>) return "say " + EventOf(a.text);
      },
      action);
}

std::string Names(const std::vector<GroupAction>& actions) {
  std::string out;
  for (const auto& a : actions) out += (out.empty() ? "" : ", ") + Name(a);
  return out;
}

etcd::KeyValue Kv(const std::string& key, const std::string& value, std::int64_t version = 1) {
  etcd::KeyValue kv;
  kv.key = key;
  kv.value = value;
  kv.version = version;
  return kv;
}
etcd::KeyValue MemberKv(int rank, const std::string& addr, std::int64_t version = 1) {
  return Kv(MemberKey(kBase, rank), Encode(Me(addr, 100 + rank)), version);
}
etcd::KeyValue JoinKv(std::uint64_t epoch, int rank, std::vector<std::uint64_t> steps) {
  return Kv(JoinKey(kBase, epoch, rank), Encode(JoinRecord{std::move(steps)}));
}
etcd::Event Put(etcd::KeyValue kv) { return etcd::Event{etcd::Event::Type::kPut, std::move(kv), std::nullopt}; }
etcd::Event Delete(const std::string& key) {
  return etcd::Event{etcd::Event::Type::kDelete, Kv(key, ""), std::nullopt};
}

ProposeCall Proposal(std::vector<std::uint64_t> steps) {
  ProposeResumeAction p;
  for (auto s : steps) p.good.push_back(checkpoint::ResumePoint{"/ck/step" + std::to_string(s), s});
  p.attempt = 1;
  return ProposeCall{p};
}

// ---- several nodes against one key-value map, in virtual time ----

// An etcd of one revision at a time: every write is applied at once, and every node's watch
// sees it as an event. Leases are ids whose keys go when a lease is revoked or lapses.
class Store {
 public:
  struct Node {
    std::unique_ptr<GroupFsm> fsm;
    std::int64_t lease = 0;
    bool watching = false;
    std::map<GroupTimer, SteadyTime> timers;  // armed, and when they fire
    std::vector<std::string> told;            // the Tell actions, by name
    std::optional<supervisor::GroupAgreedEvent> agreed;
  };

  Node& Add(const config::CoordinationSection& c, const std::string& addr) {
    auto& n = nodes_.emplace_back();
    n.fsm = std::make_unique<GroupFsm>(c, "job", Me(addr, 100 + static_cast<int>(nodes_.size())));
    return n;
  }

  void Feed(Node& n, const GroupEvent& e) {
    std::deque<std::pair<Node*, GroupEvent>> work{{&n, e}};
    while (!work.empty()) {
      auto [node, event] = std::move(work.front());
      work.pop_front();
      for (auto& a : node->fsm->Handle(event, {now_, WallTime{} + (now_ - SteadyTime{})})) Carry(*node, a, work);
    }
  }

  // Moves time to the next armed timer (of any node) and fires it; false when none is armed.
  bool Tick() {
    Node* next = nullptr;
    GroupTimer which{};
    SteadyTime at = SteadyTime::max();
    for (auto& n : nodes_) {
      for (const auto& [t, when] : n.timers) {
        if (when < at) next = &n, which = t, at = when;
      }
    }
    if (!next) return false;
    now_ = std::max(now_, at);
    next->timers.erase(which);
    Feed(*next, GroupTimerFiredEvent{which});
    return true;
  }

  // A node's machine is gone: it hears and does nothing more, and once its lease lapses its
  // keys go, which the others see.
  void Lapse(Node& n) {
    n.timers.clear();
    n.watching = false;
    Revoke(n.lease);
    n.lease = 0;
  }

  // A node whose etcd traffic stalled past its TTL (Lapse) runs again: its watch reads
  // everything anew, then its keepalive finds the lease gone.
  void Return(Node& n) {
    n.watching = true;
    SnapshotEvent s;
    for (const auto& [k, kv] : kv_) s.kvs.push_back(kv);
    Feed(n, s);
    Feed(n, LeaseLostEvent{Error{"etcdserver: requested lease not found"}});
  }

  const std::map<std::string, etcd::KeyValue>& kv() const { return kv_; }

 private:
  using Work = std::deque<std::pair<Node*, GroupEvent>>;

  void Carry(Node& n, GroupAction& action, Work& work) {
    if (auto* a = std::get_if<GrantLeaseAction>(&action)) {
      n.lease = ++next_lease_;
      work.emplace_back(&n, LeaseGrantedEvent{n.lease, a->ttl_s});
    } else if (std::holds_alternative<WatchGroupAction>(action)) {
      n.watching = true;
      SnapshotEvent s;
      for (const auto& [k, kv] : kv_) s.kvs.push_back(kv);
      work.emplace_back(&n, s);
    } else if (auto* claim = std::get_if<ClaimAction>(&action)) {
      work.emplace_back(&n, ClaimAnsweredEvent{claim->rank, Apply(claim->txn, work)});
    } else if (auto* join = std::get_if<PutJoinAction>(&action)) {
      Put(join->put, work);
      work.emplace_back(&n, JoinAnsweredEvent{join->epoch, join->previous, std::nullopt});
    } else if (auto* done = std::get_if<PutDoneAction>(&action)) {
      Put(done->put, work);
      work.emplace_back(&n, DoneAnsweredEvent{done->epoch, std::nullopt});
    } else if (auto* stop = std::get_if<PublishStopTxnAction>(&action)) {
      work.emplace_back(&n, StopAnsweredEvent{stop->epoch, stop->why, Apply(stop->txn, work)});
    } else if (auto* shrink = std::get_if<ShrinkAction>(&action)) {
      work.emplace_back(&n,
                        ShrinkAnsweredEvent{shrink->epoch, shrink->ranks, shrink->missing, Apply(shrink->txn, work)});
    } else if (auto* failures = std::get_if<RaiseFailuresAction>(&action)) {
      work.emplace_back(&n, FailuresAnsweredEvent{failures->count, Apply(failures->txn, work)});
    } else if (auto* write = std::get_if<WriteAction>(&action)) {
      if (auto* put = std::get_if<etcd::PutRequest>(&write->request)) Put(*put, work);
      if (auto* del = std::get_if<etcd::DeleteRangeRequest>(&write->request)) Remove(del->key, work);
      if (auto* txn = std::get_if<etcd::TxnRequest>(&write->request)) (void)Apply(*txn, work);
    } else if (auto* close = std::get_if<CloseAction>(&action)) {
      n.timers.clear();
      n.watching = false;
      if (close->done) Put(*close->done, work);
      if (close->lease != 0) Revoke(close->lease, &work);
    } else if (auto* arm = std::get_if<ArmGroupTimerAction>(&action)) {
      n.timers[arm->timer] = now_ + arm->after;
    } else if (auto* cancel = std::get_if<CancelGroupTimerAction>(&action)) {
      n.timers.erase(cancel->timer);
    } else if (auto* agreed = std::get_if<TellAgreedAction>(&action)) {
      n.agreed = agreed->agreed;
      n.told.push_back(Name(action));
    } else if (!std::holds_alternative<supervisor::LogAction>(action) &&
               !std::holds_alternative<KeepLeaseAction>(action) && !std::holds_alternative<DropLeaseAction>(action)) {
      n.told.push_back(Name(action));
    }
  }

  Result<bool> Apply(const etcd::TxnRequest& txn, Work& work) {
    for (const auto& c : txn.compare) {
      const auto it = kv_.find(c.key);
      const bool holds = c.target == etcd::Compare::Target::kValue ? it != kv_.end() && it->second.value == c.value
                                                                   : it == kv_.end();  // Absent
      if (!holds) return false;
    }
    for (const auto& op : txn.success) {
      if (const auto* put = std::get_if<etcd::PutRequest>(&op)) Put(*put, work);
      if (const auto* del = std::get_if<etcd::DeleteRangeRequest>(&op)) Remove(del->key, work);
    }
    return true;
  }

  void Put(const etcd::PutRequest& put, Work& work) {
    auto& kv = kv_[put.key];
    kv.key = put.key;
    kv.value = put.value;
    kv.lease = put.lease;
    ++kv.version;
    Tell(etcd::Event{etcd::Event::Type::kPut, kv, std::nullopt}, work);
  }

  void Remove(const std::string& key, Work& work) {
    if (kv_.erase(key) == 0) return;
    Tell(Delete(key), work);
  }

  void Revoke(std::int64_t lease, Work* work = nullptr) {
    Work local;
    Work& w = work ? *work : local;
    std::vector<std::string> gone;
    for (const auto& [k, kv] : kv_) {
      if (kv.lease == lease) gone.push_back(k);
    }
    for (const auto& k : gone) Remove(k, w);
    if (!work) {
      while (!local.empty()) {
        auto [node, event] = std::move(local.front());
        local.pop_front();
        Feed(*node, event);
      }
    }
  }

  void Tell(const etcd::Event& e, Work& work) {
    for (auto& n : nodes_) {
      if (n.watching) work.emplace_back(&n, KeysChangedEvent{{e}});
    }
  }

  std::deque<Node> nodes_;
  std::map<std::string, etcd::KeyValue> kv_;
  std::int64_t next_lease_ = 0;
  SteadyTime now_ = SteadyTime{} + seconds(1000);
};

bool Told(const Store::Node& n, const std::string& what) {
  return std::find(n.told.begin(), n.told.end(), what) != n.told.end();
}

TEST(GroupFsm, TwoNodesAgreeOnTheNewestStepTheyBothHaveAndStopTogether) {
  Store store;
  const auto c = Group(2, 0, 0);
  auto& a = store.Add(c, "10.0.0.1");
  auto& b = store.Add(c, "10.0.0.2");
  store.Feed(a, StartCall{});
  store.Feed(b, StartCall{});
  EXPECT_EQ(a.fsm->seat(), Seat::kHolding);
  EXPECT_EQ(b.fsm->seat(), Seat::kHolding);
  EXPECT_FALSE(a.fsm->InAgreedEpoch());  // nothing agreed yet
  store.Feed(a, Proposal({30, 20}));
  EXPECT_EQ(a.fsm->course(), Course::kProposed);
  store.Feed(b, Proposal({20, 10}));
  ASSERT_TRUE(a.agreed && b.agreed);
  EXPECT_TRUE(a.fsm->InAgreedEpoch() && b.fsm->InAgreedEpoch());
  ASSERT_TRUE(a.agreed->point);
  EXPECT_EQ(a.agreed->point->step, 20u);
  EXPECT_EQ(b.agreed->point->step, 20u);
  EXPECT_EQ(a.agreed->place.world, 2);
  EXPECT_EQ(a.agreed->place.rank + b.agreed->place.rank, 1);
  EXPECT_EQ(a.agreed->place.epoch, 1u);
  EXPECT_EQ(b.agreed->place.master_addr, a.fsm->rank() == 0 ? "10.0.0.1" : "10.0.0.2");
  // A's notice: B hears it once, with the deadline's time left as its grace cap.
  store.Feed(a, PublishStopCall{{"notice: aws spot-itn", milliseconds(90000), std::nullopt}});
  EXPECT_TRUE(Told(b, "tell peer stop"));
  EXPECT_FALSE(Told(a, "tell peer stop"));
  EXPECT_EQ(store.kv().count(StopKey(kBase, 1)), 1u);
  // A node whose lease ran out while its trainer ran (cut off, or stopped past its TTL) is no
  // longer sure its trainer is of the group's epoch, even once it holds a new lease: what that
  // trainer saves meanwhile must not decide what the checkpoints dir keeps.
  store.Feed(b, LeaseLostEvent{Error{"no etcd member answered a keepalive before its TTL ran out"}});
  EXPECT_FALSE(b.fsm->InAgreedEpoch());
}

TEST(GroupFsm, ASpareTakesALostRankAtOnceAndSelectsAgain) {
  Store store;
  const auto c = Group(2, 1, 0);
  auto& a = store.Add(c, "10.0.0.1");
  auto& b = store.Add(c, "10.0.0.2");
  auto& s = store.Add(c, "10.0.0.3");
  for (auto* n : {&a, &b, &s}) store.Feed(*n, StartCall{});
  EXPECT_EQ(s.fsm->seat(), Seat::kSpare);
  store.Feed(a, Proposal({10}));
  store.Feed(b, Proposal({10}));
  store.Feed(s, Proposal({10}));
  EXPECT_EQ(s.told, (std::vector<std::string>{"tell spare"}));
  store.Lapse(b);  // B's machine is gone
  EXPECT_TRUE(Told(a, "tell peer stop"));
  EXPECT_EQ(s.fsm->seat(), Seat::kHolding);
  EXPECT_EQ(s.fsm->rank(), 1);
  EXPECT_EQ(s.told, (std::vector<std::string>{"tell spare", "tell select again"}));
  // A rejoins after its stop, the spare after selecting again: they agree on epoch 2.
  a.agreed.reset();
  store.Feed(a, Proposal({20, 10}));
  store.Feed(s, Proposal({20, 10}));
  ASSERT_TRUE(a.agreed && s.agreed);
  EXPECT_EQ(s.agreed->place.epoch, 2u);
  EXPECT_EQ(s.agreed->point->step, 20u);
}

TEST(GroupFsm, ALostRankNobodyTakesShrinksTheGroupAfterShrinkAfterAndAReturningNodeGrowsIt) {
  Store store;
  const auto c = Group(3, 0, 2);
  auto& a = store.Add(c, "10.0.0.1");
  auto& b = store.Add(c, "10.0.0.2");
  auto& d = store.Add(c, "10.0.0.3");
  for (auto* n : {&a, &b, &d}) store.Feed(*n, StartCall{});
  for (auto* n : {&a, &b, &d}) store.Feed(*n, Proposal({10}));
  ASSERT_TRUE(a.agreed && b.agreed && d.agreed);
  store.Lapse(d);
  EXPECT_TRUE(Told(a, "tell peer stop"));
  a.agreed.reset();
  b.agreed.reset();
  store.Feed(a, Proposal({20, 10}));
  store.Feed(b, Proposal({20, 10}));
  EXPECT_EQ(a.fsm->course(), Course::kProposed);  // waiting for rank 2 ...
  while (!(a.agreed && b.agreed) && store.Tick()) {
  }
  // ... for shrink_after, in virtual time; then two nodes train on.
  ASSERT_TRUE(a.agreed && b.agreed);
  EXPECT_EQ(a.agreed->place.world, 2);
  EXPECT_EQ(store.kv().count(ShrinkKey(kBase, 2)), 1u);
  // A new machine for rank 2: it waits until the shrunken group stops at a checkpoint.
  a.told.clear();
  auto& e = store.Add(c, "10.0.0.4");
  store.Feed(e, StartCall{});
  EXPECT_EQ(e.fsm->seat(), Seat::kHolding);
  EXPECT_EQ(e.fsm->rank(), 2);
  store.Feed(e, Proposal({10}));
  EXPECT_EQ(e.fsm->course(), Course::kGrowthHeld);
  EXPECT_EQ(e.told, (std::vector<std::string>{"tell spare"}));
  EXPECT_EQ(a.told, (std::vector<std::string>{"tell grow"}));  // the group grows at its next checkpoint
  // A's trainer stops there (its Fsm's decision), and the group with it.
  store.Feed(a, PublishStopCall{{"grow: node 2 joined the shrunken group", std::nullopt, std::nullopt}});
  EXPECT_TRUE(Told(b, "tell peer stop"));
  EXPECT_EQ(e.fsm->course(), Course::kNone);
  EXPECT_EQ(e.told.back(), "tell select again");
  // All three join epoch 3 and start whole.
  a.agreed.reset();
  b.agreed.reset();
  for (auto* n : {&a, &b, &e}) store.Feed(*n, Proposal({30, 20}));
  ASSERT_TRUE(a.agreed && b.agreed && e.agreed);
  EXPECT_EQ(e.agreed->place.world, 3);
  EXPECT_EQ(e.agreed->place.epoch, 3u);
}

// A node stopped past its lease while its trainer computes: its own judgement of the cut-off
// lets such a trainer go on (only etcd may be away), and the peer that shrank without it
// publishes no stop for the old epoch. What it sees on its return, an epoch agreed without
// it, stops the trainer; it then waits for the group to grow.
TEST(GroupFsm, ANodeLeftBehindWhileCutOffStopsItsTrainerAndTheGroupGrowsBack) {
  Store store;
  const auto c = Group(2, 0, 1);
  auto& a = store.Add(c, "10.0.0.1");
  auto& b = store.Add(c, "10.0.0.2");
  for (auto* n : {&a, &b}) store.Feed(*n, StartCall{});
  for (auto* n : {&a, &b}) store.Feed(*n, Proposal({10}));
  ASSERT_TRUE(a.agreed && b.agreed);
  store.Lapse(b);
  EXPECT_TRUE(Told(a, "tell peer stop"));
  a.agreed.reset();
  store.Feed(a, Proposal({20, 10}));
  while (!a.agreed && store.Tick()) {
  }
  ASSERT_TRUE(a.agreed);
  EXPECT_EQ(a.agreed->place.world, 1);
  EXPECT_EQ(a.agreed->place.epoch, 2u);
  a.told.clear();
  store.Return(b);
  EXPECT_EQ(b.told, (std::vector<std::string>{"tell agreed", "tell peer stop", "tell cut off"}));
  EXPECT_FALSE(b.fsm->InAgreedEpoch());
  // Told once: the cut-off's judgement and a later look at the group do not stop it again.
  store.Feed(b, KeysChangedEvent{{Put(Kv(EpochKey(kBase), "2", 2))}});
  EXPECT_EQ(std::count(b.told.begin(), b.told.end(), "tell peer stop"), 1);
  while (b.fsm->seat() != Seat::kHolding && store.Tick()) {
  }
  ASSERT_EQ(b.fsm->seat(), Seat::kHolding);
  // Its trainer stopped, it selected again: it waits for the group's next checkpoint.
  store.Feed(b, Proposal({10}));
  EXPECT_EQ(b.fsm->course(), Course::kGrowthHeld);
  EXPECT_EQ(a.told, (std::vector<std::string>{"tell grow"}));
}

// ---- every seat and course against every event ----

// A node of a 2-node group with one spare allowed and min_nodes 1, at 10.0.0.1; the peer
// at 10.0.0.2 holds rank 1.
struct State {
  std::string name;
  std::vector<GroupEvent> path;  // the events that lead there
  Seat seat;
  Course course;
};

std::vector<State> States() {
  const etcd::KeyValue peer = MemberKv(1, "10.0.0.2");
  const GroupEvent start = StartCall{};
  const GroupEvent granted = LeaseGrantedEvent{7, 10};
  const GroupEvent empty = SnapshotEvent{};
  const GroupEvent peer_holds_1 = SnapshotEvent{{peer}};
  const GroupEvent all_held = SnapshotEvent{{MemberKv(0, "10.0.0.3"), peer}};
  const GroupEvent claimed_0 = ClaimAnsweredEvent{0, true};
  const GroupEvent joined_1 = JoinAnsweredEvent{1, 0, std::nullopt};
  const GroupEvent own_join_1 = KeysChangedEvent{{Put(JoinKv(1, 0, {10}))}};
  const GroupEvent peer_joins_1 = KeysChangedEvent{{Put(JoinKv(1, 1, {10})), Put(JoinKv(1, 0, {10}))}};
  // Epoch 1 runs shrunken with rank 1 alone: this node's rank 0 is outside it.
  const GroupEvent shrunken_1 =
      SnapshotEvent{{peer, Kv(EpochKey(kBase), "1"), Kv(ShrinkKey(kBase, 1), "{\"ranks\":[1]}"), JoinKv(1, 1, {10})}};
  const GroupEvent both_done =
      KeysChangedEvent{{Put(Kv(DoneKey(kBase, 1, 0), "{}")), Put(Kv(DoneKey(kBase, 1, 1), "{}"))}};
  const std::vector<GroupEvent> running = {start,          granted,  peer_holds_1, claimed_0,
                                           Proposal({10}), joined_1, peer_joins_1};
  // Nobody else came within shrink_after: epoch 1 starts with rank 0 alone.
  const std::vector<GroupEvent> alone = {start,
                                         granted,
                                         empty,
                                         claimed_0,
                                         KeysChangedEvent{{Put(MemberKv(0, "10.0.0.1"))}},
                                         Proposal({10}),
                                         joined_1,
                                         own_join_1,
                                         GroupTimerFiredEvent{GroupTimer::kShrink},
                                         KeysChangedEvent{{Put(Kv(ShrinkKey(kBase, 1), "{\"ranks\":[0]}"))}}};
  auto then = [](std::vector<GroupEvent> path, std::vector<GroupEvent> more) {
    path.insert(path.end(), more.begin(), more.end());
    return path;
  };
  return {
      {"idle", {}, Seat::kIdle, Course::kNone},
      {"connecting", {start}, Seat::kConnecting, Course::kNone},
      {"claiming", {start, granted, empty}, Seat::kClaiming, Course::kNone},
      {"claiming, proposed", {start, granted, empty, Proposal({10})}, Seat::kClaiming, Course::kProposed},
      {"spare", {start, granted, all_held}, Seat::kSpare, Course::kNone},
      {"spare, proposed", {start, granted, all_held, Proposal({10})}, Seat::kSpare, Course::kProposed},
      {"holding", {start, granted, peer_holds_1, claimed_0}, Seat::kHolding, Course::kNone},
      {"holding, joined epoch 1",
       {start, granted, peer_holds_1, claimed_0, Proposal({10}), joined_1, own_join_1},
       Seat::kHolding,
       Course::kProposed},
      {"holding, held for growth",
       {start, granted, shrunken_1, claimed_0, Proposal({10})},
       Seat::kHolding,
       Course::kGrowthHeld},
      {"holding, running epoch 1", running, Seat::kHolding, Course::kRunning},
      {"holding, running epoch 1 alone", alone, Seat::kHolding, Course::kRunning},
      {"holding, finishing epoch 1", then(running, {PublishDoneCall{}}), Seat::kHolding, Course::kFinishing},
      {"holding, epoch 1 finished", then(running, {PublishDoneCall{}, both_done}), Seat::kHolding, Course::kFinished},
      {"cut off while running", then(running, {LeaseLostEvent{Error{"no member answered"}}}), Seat::kConnecting,
       Course::kRunning},
      // Stopped past its TTL: once it runs again the watch tells of its own key's end first, and
      // etcd refuses the claim under the lapsed lease; the keepalive's news comes next.
      {"re-claiming its rank while running",
       then(running, {KeysChangedEvent{{Delete(MemberKey(kBase, 0))}},
                      ClaimAnsweredEvent{0, Error{"etcdserver: requested lease not found"}}}),
       Seat::kClaiming, Course::kRunning},
      {"released", then(running, {ReleaseRankCall{}}), Seat::kReleased, Course::kNone},
      {"left", then(running, {LeaveCall{false}}), Seat::kLeft, Course::kNone},
  };
}

struct Column {
  std::string name;
  GroupEvent event;
};

std::vector<Column> Columns() {
  return {
      {"start", StartCall{}},
      {"propose", Proposal({10})},
      {"publish stop", PublishStopCall{{"notice: aws spot-itn", milliseconds(60000), 2}}},
      {"publish done", PublishDoneCall{}},
      {"release rank", ReleaseRankCall{}},
      {"leave", LeaveCall{false}},
      {"lease granted", LeaseGrantedEvent{9, 10}},
      {"lease grant failed", LeaseGrantFailedEvent{Error{"connection refused"}}},
      {"lease lost", LeaseLostEvent{Error{"lease expired"}}},
      {"snapshot: rank 1 held", SnapshotEvent{{MemberKv(1, "10.0.0.2")}}},
      {"rank 1's key gone", KeysChangedEvent{{Delete(MemberKey(kBase, 1))}}},
      {"rank 1's key said again", KeysChangedEvent{{Put(MemberKv(1, "10.0.0.2", 2))}}},
      // Rank 1 started epoch 2 alone (this node was cut off meanwhile).
      {"epoch 2 agreed without rank 0", KeysChangedEvent{{Put(Kv(ShrinkKey(kBase, 2), "{\"ranks\":[1]}")),
                                                          Put(JoinKv(2, 1, {10})), Put(Kv(EpochKey(kBase), "2"))}}},
      {"watch lost", ConnectionEvent{false, "stream ended"}},
      {"claim of rank 0 held", ClaimAnsweredEvent{0, true}},
      {"join of epoch 1 failed", JoinAnsweredEvent{1, 0, Error{"timeout"}}},
      {"done of epoch 1 written", DoneAnsweredEvent{1, std::nullopt}},
      {"stop of epoch 1 written first", StopAnsweredEvent{1, "notice", true}},
      {"shrink of epoch 1 written", ShrinkAnsweredEvent{1, {0}, {1}, true}},
      {"failures raised to 2", FailuresAnsweredEvent{2, true}},
      {"a write failed", WriteFailedEvent{"cannot tell the group", Error{"timeout"}}},
      {"timer lease_retry", GroupTimerFiredEvent{GroupTimer::kLeaseRetry}},
      {"timer claim_retry", GroupTimerFiredEvent{GroupTimer::kClaimRetry}},
      {"timer join_retry", GroupTimerFiredEvent{GroupTimer::kJoinRetry}},
      {"timer done_retry", GroupTimerFiredEvent{GroupTimer::kDoneRetry}},
      {"timer shrink", GroupTimerFiredEvent{GroupTimer::kShrink}},
  };
}

// One cell: after the column's event, the seat and course, and the actions by name.
struct Cell {
  std::string column;
  std::string after;  // "seat/course"
  std::string actions;
};

// The table: for each state (States()), one cell per column (Columns()), in order. Read a
// row as "a node that is ... and then ...": where it is after, and what it does. A column
// that changes nothing says "" (the event cannot come there, or means nothing there).
std::map<std::string, std::vector<Cell>> Table() {
  return {
      {"idle",
       {
           {"start", "connecting/none", "say group_connecting, grant lease"},
           {"propose", "idle/proposed", "say group_waiting"},
           {"publish stop", "idle/none", "failures 2"},
           {"publish done", "idle/none", ""},
           {"release rank", "idle/none", ""},
           {"leave", "left/none", "close"},
           {"lease granted", "idle/none", ""},
           {"lease grant failed", "idle/none", ""},
           {"lease lost", "idle/none", ""},
           {"snapshot: rank 1 held", "idle/none", ""},
           {"rank 1's key gone", "idle/none", ""},
           {"rank 1's key said again", "idle/none", ""},
           {"epoch 2 agreed without rank 0", "idle/none", ""},
           {"watch lost", "idle/none", ""},
           {"claim of rank 0 held", "idle/none", ""},
           {"join of epoch 1 failed", "idle/none", ""},
           {"done of epoch 1 written", "idle/none", ""},
           {"stop of epoch 1 written first", "idle/none", ""},
           {"shrink of epoch 1 written", "idle/none", ""},
           {"failures raised to 2", "idle/none", ""},
           {"a write failed", "idle/none", ""},
           {"timer lease_retry", "idle/none", ""},
           {"timer claim_retry", "idle/none", ""},
           {"timer join_retry", "idle/none", ""},
           {"timer done_retry", "idle/none", ""},
           {"timer shrink", "idle/none", ""},
       }},
      {"connecting",
       {
           {"start", "connecting/none", ""},
           {"propose", "connecting/proposed", "say group_waiting"},
           {"publish stop", "connecting/none", "failures 2"},
           {"publish done", "connecting/none", ""},
           {"release rank", "released/none", ""},
           {"leave", "left/none", "close"},
           {"lease granted", "claiming/none", "keep lease, watch"},
           {"lease grant failed", "connecting/none", "say group_trouble, arm lease_retry"},
           {"lease lost", "connecting/none", "say group_lease_lost, drop lease, arm lease_retry"},
           {"snapshot: rank 1 held", "connecting/none", ""},
           {"rank 1's key gone", "connecting/none", ""},
           {"rank 1's key said again", "connecting/none", ""},
           {"epoch 2 agreed without rank 0", "connecting/none", ""},
           {"watch lost", "connecting/none", "say group_trouble"},
           {"claim of rank 0 held", "connecting/none", ""},
           {"join of epoch 1 failed", "connecting/none", ""},
           {"done of epoch 1 written", "connecting/none", ""},
           {"stop of epoch 1 written first", "connecting/none", "say group_stop_published"},
           {"shrink of epoch 1 written", "connecting/none", "say group_shrinking"},
           {"failures raised to 2", "connecting/none", "say group_failures"},
           {"a write failed", "connecting/none", "say group_trouble"},
           {"timer lease_retry", "connecting/none", "grant lease"},
           {"timer claim_retry", "connecting/none", ""},
           {"timer join_retry", "connecting/none", ""},
           {"timer done_retry", "connecting/none", ""},
           {"timer shrink", "connecting/none", ""},
       }},
      {"claiming",
       {
           {"start", "claiming/none", ""},
           {"propose", "claiming/proposed", "say group_waiting"},
           {"publish stop", "claiming/none", "failures 2"},
           {"publish done", "claiming/none", ""},
           {"release rank", "released/none", ""},
           {"leave", "left/none", "say group_left, close, revoke"},
           {"lease granted", "claiming/none", ""},
           {"lease grant failed", "claiming/none", "say group_trouble, arm lease_retry"},
           {"lease lost", "connecting/none", "say group_lease_lost, drop lease, arm lease_retry"},
           {"snapshot: rank 1 held", "claiming/none", ""},
           {"rank 1's key gone", "claiming/none", ""},
           {"rank 1's key said again", "claiming/none", ""},
           {"epoch 2 agreed without rank 0", "claiming/none", ""},
           {"watch lost", "claiming/none", "say group_trouble"},
           {"claim of rank 0 held", "holding/none", "say group_joined"},
           {"join of epoch 1 failed", "claiming/none", ""},
           {"done of epoch 1 written", "claiming/none", ""},
           {"stop of epoch 1 written first", "claiming/none", "say group_stop_published"},
           {"shrink of epoch 1 written", "claiming/none", "say group_shrinking"},
           {"failures raised to 2", "claiming/none", "say group_failures"},
           {"a write failed", "claiming/none", "say group_trouble"},
           {"timer lease_retry", "claiming/none", ""},
           {"timer claim_retry", "claiming/none", ""},
           {"timer join_retry", "claiming/none", ""},
           {"timer done_retry", "claiming/none", ""},
           {"timer shrink", "claiming/none", ""},
       }},
      {"claiming, proposed",
       {
           {"start", "claiming/proposed", ""},
           {"propose", "claiming/proposed", "say group_waiting"},
           {"publish stop", "claiming/none", "failures 2"},
           {"publish done", "claiming/proposed", ""},
           {"release rank", "released/none", ""},
           {"leave", "left/none", "say group_left, close, revoke"},
           {"lease granted", "claiming/proposed", ""},
           {"lease grant failed", "claiming/proposed", "say group_trouble, arm lease_retry"},
           {"lease lost", "connecting/proposed", "say group_lease_lost, drop lease, arm lease_retry"},
           {"snapshot: rank 1 held", "claiming/proposed", ""},
           {"rank 1's key gone", "claiming/proposed", ""},
           {"rank 1's key said again", "claiming/proposed", ""},
           {"epoch 2 agreed without rank 0", "claiming/proposed", ""},
           {"watch lost", "claiming/proposed", "say group_trouble"},
           {"claim of rank 0 held", "holding/proposed", "say group_joined, join 1"},
           {"join of epoch 1 failed", "claiming/proposed", ""},
           {"done of epoch 1 written", "claiming/proposed", ""},
           {"stop of epoch 1 written first", "claiming/proposed", "say group_stop_published"},
           {"shrink of epoch 1 written", "claiming/proposed", "say group_shrinking"},
           {"failures raised to 2", "claiming/proposed", "say group_failures"},
           {"a write failed", "claiming/proposed", "say group_trouble"},
           {"timer lease_retry", "claiming/proposed", ""},
           {"timer claim_retry", "claiming/proposed", ""},
           {"timer join_retry", "claiming/proposed", ""},
           {"timer done_retry", "claiming/proposed", ""},
           {"timer shrink", "claiming/proposed", ""},
       }},
      {"spare",
       {
           {"start", "spare/none", ""},
           {"propose", "spare/proposed", "say group_waiting, tell spare"},
           {"publish stop", "spare/none", "failures 2"},
           {"publish done", "spare/none", ""},
           {"release rank", "released/none", "cancel claim_retry, delete spares/00000000000000000007, say spare_left"},
           {"leave", "left/none", "say group_left, close, revoke"},
           {"lease granted", "spare/none", ""},
           {"lease grant failed", "spare/none", "say group_trouble, arm lease_retry"},
           {"lease lost", "connecting/none", "say group_lease_lost, drop lease, arm lease_retry"},
           {"snapshot: rank 1 held", "spare/none", "claim 0"},
           {"rank 1's key gone", "spare/none", "claim 1"},
           {"rank 1's key said again", "spare/none", ""},
           {"epoch 2 agreed without rank 0", "spare/none", ""},
           {"watch lost", "spare/none", "say group_trouble"},
           {"claim of rank 0 held", "holding/none", "delete spares/00000000000000000007, say group_joined"},
           {"join of epoch 1 failed", "spare/none", ""},
           {"done of epoch 1 written", "spare/none", ""},
           {"stop of epoch 1 written first", "spare/none", "say group_stop_published"},
           {"shrink of epoch 1 written", "spare/none", "say group_shrinking"},
           {"failures raised to 2", "spare/none", "say group_failures"},
           {"a write failed", "spare/none", "say group_trouble"},
           {"timer lease_retry", "spare/none", ""},
           {"timer claim_retry", "spare/none", "arm claim_retry"},
           {"timer join_retry", "spare/none", ""},
           {"timer done_retry", "spare/none", ""},
           {"timer shrink", "spare/none", ""},
       }},
      {"spare, proposed",
       {
           {"start", "spare/proposed", ""},
           {"propose", "spare/proposed", "say group_waiting, tell spare"},
           {"publish stop", "spare/none", "failures 2"},
           {"publish done", "spare/proposed", ""},
           {"release rank", "released/none", "cancel claim_retry, delete spares/00000000000000000007, say spare_left"},
           {"leave", "left/none", "say group_left, close, revoke"},
           {"lease granted", "spare/proposed", ""},
           {"lease grant failed", "spare/proposed", "say group_trouble, arm lease_retry"},
           {"lease lost", "connecting/proposed", "say group_lease_lost, drop lease, arm lease_retry"},
           {"snapshot: rank 1 held", "spare/proposed", "claim 0"},
           {"rank 1's key gone", "spare/proposed", "claim 1"},
           {"rank 1's key said again", "spare/proposed", ""},
           {"epoch 2 agreed without rank 0", "spare/proposed", ""},
           {"watch lost", "spare/proposed", "say group_trouble"},
           {"claim of rank 0 held", "holding/none",
            "delete spares/00000000000000000007, say group_joined, tell select again"},
           {"join of epoch 1 failed", "spare/proposed", ""},
           {"done of epoch 1 written", "spare/proposed", ""},
           {"stop of epoch 1 written first", "spare/proposed", "say group_stop_published"},
           {"shrink of epoch 1 written", "spare/proposed", "say group_shrinking"},
           {"failures raised to 2", "spare/proposed", "say group_failures"},
           {"a write failed", "spare/proposed", "say group_trouble"},
           {"timer lease_retry", "spare/proposed", ""},
           {"timer claim_retry", "spare/proposed", "arm claim_retry"},
           {"timer join_retry", "spare/proposed", ""},
           {"timer done_retry", "spare/proposed", ""},
           {"timer shrink", "spare/proposed", ""},
       }},
      {"holding",
       {
           {"start", "holding/none", ""},
           {"propose", "holding/proposed", "say group_waiting, join 1"},
           {"publish stop", "holding/none", "failures 2"},
           {"publish done", "holding/none", ""},
           {"release rank", "released/none", "say group_rank_released, txn delete members/0000"},
           {"leave", "left/none", "say group_left, close, revoke"},
           {"lease granted", "holding/none", ""},
           {"lease grant failed", "holding/none", "say group_trouble, arm lease_retry"},
           {"lease lost", "connecting/none", "say group_lease_lost, drop lease, arm lease_retry"},
           {"snapshot: rank 1 held", "holding/none", ""},
           {"rank 1's key gone", "holding/none", ""},
           {"rank 1's key said again", "holding/none", ""},
           {"epoch 2 agreed without rank 0", "holding/none", ""},
           {"watch lost", "holding/none", "say group_trouble"},
           {"claim of rank 0 held", "holding/none", ""},
           {"join of epoch 1 failed", "holding/none", ""},
           {"done of epoch 1 written", "holding/none", ""},
           {"stop of epoch 1 written first", "holding/none", "say group_stop_published"},
           {"shrink of epoch 1 written", "holding/none", "say group_shrinking"},
           {"failures raised to 2", "holding/none", "say group_failures"},
           {"a write failed", "holding/none", "say group_trouble"},
           {"timer lease_retry", "holding/none", ""},
           {"timer claim_retry", "holding/none", ""},
           {"timer join_retry", "holding/none", ""},
           {"timer done_retry", "holding/none", ""},
           {"timer shrink", "holding/none", ""},
       }},
      {"holding, joined epoch 1",
       {
           {"start", "holding/proposed", ""},
           {"propose", "holding/proposed", "say group_waiting"},
           {"publish stop", "holding/none", "failures 2, delete join/000000000001/0000"},
           {"publish done", "holding/proposed", ""},
           {"release rank", "released/none",
            "delete join/000000000001/0000, say group_rank_released, txn delete members/0000"},
           {"leave", "left/none", "say group_left, close, revoke"},
           {"lease granted", "holding/proposed", ""},
           {"lease grant failed", "holding/proposed", "say group_trouble, arm lease_retry"},
           {"lease lost", "connecting/proposed", "say group_lease_lost, drop lease, arm lease_retry"},
           {"snapshot: rank 1 held", "holding/proposed", ""},
           {"rank 1's key gone", "holding/proposed", ""},
           {"rank 1's key said again", "holding/proposed", ""},
           {"epoch 2 agreed without rank 0", "holding/growth_held",
            "say group_grow_waiting, put members/0000, tell spare"},
           {"watch lost", "holding/proposed", "say group_trouble"},
           {"claim of rank 0 held", "holding/proposed", ""},
           {"join of epoch 1 failed", "holding/proposed", "say group_trouble, arm join_retry"},
           {"done of epoch 1 written", "holding/proposed", ""},
           {"stop of epoch 1 written first", "holding/proposed", "say group_stop_published"},
           {"shrink of epoch 1 written", "holding/proposed", "say group_shrinking"},
           {"failures raised to 2", "holding/proposed", "say group_failures"},
           {"a write failed", "holding/proposed", "say group_trouble"},
           {"timer lease_retry", "holding/proposed", ""},
           {"timer claim_retry", "holding/proposed", ""},
           {"timer join_retry", "holding/proposed", ""},
           {"timer done_retry", "holding/proposed", ""},
           {"timer shrink", "holding/proposed", "shrink 1"},
       }},
      {"holding, held for growth",
       {
           {"start", "holding/growth_held", ""},
           {"propose", "holding/growth_held", "say group_waiting"},
           {"publish stop", "holding/none", "failures 2"},
           {"publish done", "holding/growth_held", ""},
           {"release rank", "released/none", "say group_rank_released, txn delete members/0000"},
           {"leave", "left/none", "say group_left, close, revoke"},
           {"lease granted", "holding/growth_held", ""},
           {"lease grant failed", "holding/growth_held", "say group_trouble, arm lease_retry"},
           {"lease lost", "connecting/growth_held", "say group_lease_lost, drop lease, arm lease_retry"},
           {"snapshot: rank 1 held", "holding/growth_held", ""},
           {"rank 1's key gone", "holding/growth_held", ""},
           {"rank 1's key said again", "holding/growth_held", ""},
           {"epoch 2 agreed without rank 0", "holding/none", "say group_grow_ready, tell select again"},
           {"watch lost", "holding/growth_held", "say group_trouble"},
           {"claim of rank 0 held", "holding/growth_held", ""},
           {"join of epoch 1 failed", "holding/growth_held", ""},
           {"done of epoch 1 written", "holding/growth_held", ""},
           {"stop of epoch 1 written first", "holding/growth_held", "say group_stop_published"},
           {"shrink of epoch 1 written", "holding/growth_held", "say group_shrinking"},
           {"failures raised to 2", "holding/growth_held", "say group_failures"},
           {"a write failed", "holding/growth_held", "say group_trouble"},
           {"timer lease_retry", "holding/growth_held", ""},
           {"timer claim_retry", "holding/growth_held", ""},
           {"timer join_retry", "holding/growth_held", ""},
           {"timer done_retry", "holding/growth_held", ""},
           {"timer shrink", "holding/growth_held", ""},
       }},
      {"holding, running epoch 1",
       {
           {"start", "holding/running", ""},
           {"propose", "holding/proposed", "say group_waiting, join 2"},
           {"publish stop", "holding/running", "failures 2, stop 1"},
           {"publish done", "holding/finishing", "done 1"},
           {"release rank", "released/none", "say group_rank_released, txn delete members/0000"},
           {"leave", "left/none", "say group_left, close, revoke"},
           {"lease granted", "holding/running", ""},
           {"lease grant failed", "holding/running", "say group_trouble, arm lease_retry"},
           {"lease lost", "connecting/running", "say group_lease_lost, tell cut off, drop lease, arm lease_retry"},
           {"snapshot: rank 1 held", "holding/running", ""},
           {"rank 1's key gone", "holding/running", "say peer_stop, tell peer stop"},
           {"rank 1's key said again", "holding/running", ""},
           {"epoch 2 agreed without rank 0", "holding/running", "say group_left_behind, tell peer stop"},
           {"watch lost", "holding/running", "say group_trouble"},
           {"claim of rank 0 held", "holding/running", ""},
           {"join of epoch 1 failed", "holding/running", ""},
           {"done of epoch 1 written", "holding/running", ""},
           {"stop of epoch 1 written first", "holding/running", "say group_stop_published"},
           {"shrink of epoch 1 written", "holding/running", "say group_shrinking"},
           {"failures raised to 2", "holding/running", "say group_failures"},
           {"a write failed", "holding/running", "say group_trouble"},
           {"timer lease_retry", "holding/running", ""},
           {"timer claim_retry", "holding/running", ""},
           {"timer join_retry", "holding/running", ""},
           {"timer done_retry", "holding/running", ""},
           {"timer shrink", "holding/running", ""},
       }},
      {"holding, running epoch 1 alone",
       {
           {"start", "holding/running", ""},
           {"propose", "holding/proposed", "say group_waiting, join 2"},
           {"publish stop", "holding/running", "failures 2, stop 1"},
           {"publish done", "holding/finishing", "done 1"},
           {"release rank", "released/none", "say group_rank_released, txn delete members/0000"},
           {"leave", "left/none", "say group_left, close, revoke"},
           {"lease granted", "holding/running", ""},
           {"lease grant failed", "holding/running", "say group_trouble, arm lease_retry"},
           {"lease lost", "connecting/running", "say group_lease_lost, tell cut off, drop lease, arm lease_retry"},
           {"snapshot: rank 1 held", "holding/running", ""},
           {"rank 1's key gone", "holding/running", ""},
           {"rank 1's key said again", "holding/running", "say group_growing, tell grow"},
           {"epoch 2 agreed without rank 0", "holding/running", "say group_left_behind, tell peer stop"},
           {"watch lost", "holding/running", "say group_trouble"},
           {"claim of rank 0 held", "holding/running", ""},
           {"join of epoch 1 failed", "holding/running", ""},
           {"done of epoch 1 written", "holding/running", ""},
           {"stop of epoch 1 written first", "holding/running", "say group_stop_published"},
           {"shrink of epoch 1 written", "holding/running", "say group_shrinking"},
           {"failures raised to 2", "holding/running", "say group_failures"},
           {"a write failed", "holding/running", "say group_trouble"},
           {"timer lease_retry", "holding/running", ""},
           {"timer claim_retry", "holding/running", ""},
           {"timer join_retry", "holding/running", ""},
           {"timer done_retry", "holding/running", ""},
           {"timer shrink", "holding/running", ""},
       }},
      {"holding, finishing epoch 1",
       {
           {"start", "holding/finishing", ""},
           {"propose", "holding/proposed", "say group_waiting, join 2"},
           {"publish stop", "holding/finishing", "failures 2, stop 1"},
           {"publish done", "holding/finishing", "done 1"},
           {"release rank", "released/none", "say group_rank_released, txn delete members/0000"},
           {"leave", "left/none", "say group_left, close, revoke"},
           {"lease granted", "holding/finishing", ""},
           {"lease grant failed", "holding/finishing", "say group_trouble, arm lease_retry"},
           {"lease lost", "connecting/finishing", "say group_lease_lost, tell cut off, drop lease, arm lease_retry"},
           {"snapshot: rank 1 held", "holding/finishing", ""},
           {"rank 1's key gone", "holding/finishing", "say peer_stop, tell peer stop"},
           {"rank 1's key said again", "holding/finishing", ""},
           {"epoch 2 agreed without rank 0", "holding/finishing", "say group_left_behind, tell peer stop"},
           {"watch lost", "holding/finishing", "say group_trouble"},
           {"claim of rank 0 held", "holding/finishing", ""},
           {"join of epoch 1 failed", "holding/finishing", ""},
           {"done of epoch 1 written", "holding/finishing", ""},
           {"stop of epoch 1 written first", "holding/finishing", "say group_stop_published"},
           {"shrink of epoch 1 written", "holding/finishing", "say group_shrinking"},
           {"failures raised to 2", "holding/finishing", "say group_failures"},
           {"a write failed", "holding/finishing", "say group_trouble"},
           {"timer lease_retry", "holding/finishing", ""},
           {"timer claim_retry", "holding/finishing", ""},
           {"timer join_retry", "holding/finishing", ""},
           {"timer done_retry", "holding/finishing", "done 1"},
           {"timer shrink", "holding/finishing", ""},
       }},
      {"holding, epoch 1 finished",
       {
           {"start", "holding/finished", ""},
           {"propose", "holding/proposed", "say group_waiting, join 2"},
           {"publish stop", "holding/finished", "failures 2, stop 1"},
           {"publish done", "holding/finishing", "done 1"},
           {"release rank", "released/none", "say group_rank_released, txn delete members/0000"},
           {"leave", "left/none", "say group_left, close, revoke"},
           {"lease granted", "holding/finished", ""},
           {"lease grant failed", "holding/finished", "say group_trouble, arm lease_retry"},
           {"lease lost", "connecting/finished", "say group_lease_lost, tell cut off, drop lease, arm lease_retry"},
           {"snapshot: rank 1 held", "holding/finished", ""},
           {"rank 1's key gone", "holding/finished", "say peer_finished"},
           {"rank 1's key said again", "holding/finished", ""},
           {"epoch 2 agreed without rank 0", "holding/finished", ""},
           {"watch lost", "holding/finished", "say group_trouble"},
           {"claim of rank 0 held", "holding/finished", ""},
           {"join of epoch 1 failed", "holding/finished", ""},
           {"done of epoch 1 written", "holding/finished", ""},
           {"stop of epoch 1 written first", "holding/finished", "say group_stop_published"},
           {"shrink of epoch 1 written", "holding/finished", "say group_shrinking"},
           {"failures raised to 2", "holding/finished", "say group_failures"},
           {"a write failed", "holding/finished", "say group_trouble"},
           {"timer lease_retry", "holding/finished", ""},
           {"timer claim_retry", "holding/finished", ""},
           {"timer join_retry", "holding/finished", ""},
           {"timer done_retry", "holding/finished", ""},
           {"timer shrink", "holding/finished", ""},
       }},
      {"re-claiming its rank while running",
       {
           {"start", "claiming/running", ""},
           {"propose", "claiming/proposed", "say group_waiting"},
           {"publish stop", "claiming/running", "failures 2, stop 1"},
           {"publish done", "claiming/finishing", "done 1"},
           {"release rank", "released/none", "cancel claim_retry"},
           {"leave", "left/none", "say group_left, close, revoke"},
           {"lease granted", "claiming/running", ""},
           {"lease grant failed", "claiming/running", "say group_trouble, arm lease_retry"},
           {"lease lost", "connecting/running", "say group_lease_lost, tell cut off, drop lease, arm lease_retry"},
           {"snapshot: rank 1 held", "claiming/running", "claim 0"},
           {"rank 1's key gone", "claiming/running", "say peer_stop, tell peer stop"},
           {"rank 1's key said again", "claiming/running", ""},
           {"epoch 2 agreed without rank 0", "claiming/running", "say group_left_behind, tell peer stop"},
           {"watch lost", "claiming/running", "say group_trouble"},
           {"claim of rank 0 held", "holding/running", "say group_joined"},
           {"join of epoch 1 failed", "claiming/running", ""},
           {"done of epoch 1 written", "claiming/running", ""},
           {"stop of epoch 1 written first", "claiming/running", "say group_stop_published"},
           {"shrink of epoch 1 written", "claiming/running", "say group_shrinking"},
           {"failures raised to 2", "claiming/running", "say group_failures"},
           {"a write failed", "claiming/running", "say group_trouble"},
           {"timer lease_retry", "claiming/running", ""},
           {"timer claim_retry", "claiming/running", "claim 0"},
           {"timer join_retry", "claiming/running", ""},
           {"timer done_retry", "claiming/running", ""},
           {"timer shrink", "claiming/running", ""},
       }},
      {"cut off while running",
       {
           {"start", "connecting/running", ""},
           {"propose", "connecting/proposed", "say group_waiting"},
           {"publish stop", "connecting/running", "failures 2, stop 1"},
           {"publish done", "connecting/finishing", "done 1"},
           {"release rank", "released/none", ""},
           {"leave", "left/none", "close"},
           {"lease granted", "claiming/running", "keep lease, claim 0"},
           {"lease grant failed", "connecting/running", "say group_trouble, arm lease_retry"},
           {"lease lost", "connecting/running", "say group_lease_lost, drop lease, arm lease_retry"},
           {"snapshot: rank 1 held", "connecting/running", ""},
           {"rank 1's key gone", "connecting/running", "say peer_stop, tell peer stop"},
           {"rank 1's key said again", "connecting/running", ""},
           {"epoch 2 agreed without rank 0", "connecting/running", "say group_left_behind, tell peer stop"},
           {"watch lost", "connecting/running", "say group_trouble"},
           {"claim of rank 0 held", "connecting/running", ""},
           {"join of epoch 1 failed", "connecting/running", ""},
           {"done of epoch 1 written", "connecting/running", ""},
           {"stop of epoch 1 written first", "connecting/running", "say group_stop_published"},
           {"shrink of epoch 1 written", "connecting/running", "say group_shrinking"},
           {"failures raised to 2", "connecting/running", "say group_failures"},
           {"a write failed", "connecting/running", "say group_trouble"},
           {"timer lease_retry", "connecting/running", "grant lease"},
           {"timer claim_retry", "connecting/running", ""},
           {"timer join_retry", "connecting/running", ""},
           {"timer done_retry", "connecting/running", ""},
           {"timer shrink", "connecting/running", ""},
       }},
      {"released",
       {
           {"start", "released/none", ""},
           {"propose", "claiming/proposed", "say group_waiting, claim 0"},
           {"publish stop", "released/none", "failures 2"},
           {"publish done", "released/none", ""},
           {"release rank", "released/none", ""},
           {"leave", "left/none", "say group_left, close, revoke"},
           {"lease granted", "released/none", ""},
           {"lease grant failed", "released/none", "say group_trouble, arm lease_retry"},
           {"lease lost", "released/none", "say group_lease_lost, drop lease, arm lease_retry"},
           {"snapshot: rank 1 held", "released/none", ""},
           {"rank 1's key gone", "released/none", ""},
           {"rank 1's key said again", "released/none", ""},
           {"epoch 2 agreed without rank 0", "released/none", ""},
           {"watch lost", "released/none", "say group_trouble"},
           {"claim of rank 0 held", "released/none", ""},
           {"join of epoch 1 failed", "released/none", ""},
           {"done of epoch 1 written", "released/none", ""},
           {"stop of epoch 1 written first", "released/none", "say group_stop_published"},
           {"shrink of epoch 1 written", "released/none", "say group_shrinking"},
           {"failures raised to 2", "released/none", "say group_failures"},
           {"a write failed", "released/none", "say group_trouble"},
           {"timer lease_retry", "released/none", ""},
           {"timer claim_retry", "released/none", ""},
           {"timer join_retry", "released/none", ""},
           {"timer done_retry", "released/none", ""},
           {"timer shrink", "released/none", ""},
       }},
      {"left",
       {
           {"start", "left/none", ""},
           {"propose", "left/none", ""},
           {"publish stop", "left/none", ""},
           {"publish done", "left/none", ""},
           {"release rank", "left/none", ""},
           {"leave", "left/none", ""},
           {"lease granted", "left/none", ""},
           {"lease grant failed", "left/none", ""},
           {"lease lost", "left/none", ""},
           {"snapshot: rank 1 held", "left/none", ""},
           {"rank 1's key gone", "left/none", ""},
           {"rank 1's key said again", "left/none", ""},
           {"epoch 2 agreed without rank 0", "left/none", ""},
           {"watch lost", "left/none", ""},
           {"claim of rank 0 held", "left/none", ""},
           {"join of epoch 1 failed", "left/none", ""},
           {"done of epoch 1 written", "left/none", ""},
           {"stop of epoch 1 written first", "left/none", "say group_stop_published"},
           {"shrink of epoch 1 written", "left/none", ""},
           {"failures raised to 2", "left/none", "say group_failures"},
           {"a write failed", "left/none", "say group_trouble"},
           {"timer lease_retry", "left/none", ""},
           {"timer claim_retry", "left/none", ""},
           {"timer join_retry", "left/none", ""},
           {"timer done_retry", "left/none", ""},
           {"timer shrink", "left/none", ""},
       }},
  };
}

std::string Where(const GroupFsm& fsm) { return std::string(SeatName(fsm.seat())) + "/" + CourseName(fsm.course()); }

// Timers armed along a path fire in the table only when armed: a fired timer that was not
// armed (or was cancelled) changes nothing. The path's armed timers are the row's.
TEST(GroupFsm, EveryStateDecidesEveryEvent) {
  const auto c = Group(2, 1, 1);
  const auto states = States();
  const auto columns = Columns();
  // Every alternative of GroupEvent has a column, in order; the timer one per GroupTimer.
  std::set<std::size_t> kinds;
  std::set<GroupTimer> timers;
  for (std::size_t i = 0; i < columns.size(); ++i) {
    if (i > 0) {
      ASSERT_GE(columns[i].event.index(), columns[i - 1].event.index()) << columns[i].name;
    }
    kinds.insert(columns[i].event.index());
    if (const auto* t = std::get_if<GroupTimerFiredEvent>(&columns[i].event)) timers.insert(t->timer);
  }
  ASSERT_EQ(kinds.size(), std::variant_size_v<GroupEvent>) << "an event without a column";
  ASSERT_EQ(timers.size(), std::size(kGroupTimers)) << "a timer without a column";
  const std::map<std::string, std::vector<Cell>> table = Table();
  const GroupNow now{SteadyTime{} + seconds(1000), WallTime{} + seconds(1800000000)};
  for (const auto& state : states) {
    ASSERT_EQ(table.count(state.name), 1u) << "no row for " << state.name;
    const auto& row = table.at(state.name);
    ASSERT_EQ(row.size(), columns.size()) << state.name;
    for (std::size_t i = 0; i < columns.size(); ++i) {
      GroupFsm fsm(c, "job", Me("10.0.0.1", 42));
      for (const auto& e : state.path) fsm.Handle(e, now);
      ASSERT_EQ(fsm.seat(), state.seat) << "the path to " << state.name;
      ASSERT_EQ(fsm.course(), state.course) << "the path to " << state.name;
      const auto actions = Names(fsm.Handle(columns[i].event, now));
      const Cell actual{columns[i].name, Where(fsm), actions};
      EXPECT_EQ(row[i].column, columns[i].name) << state.name << ", column " << i;
      EXPECT_TRUE(row[i].after == actual.after && row[i].actions == actual.actions)
          << state.name << ", " << columns[i].name << ": the table says\n  {\"" << row[i].column << "\", \""
          << row[i].after << "\", \"" << row[i].actions << "\"},\nthe GroupFsm did\n  {\"" << actual.column << "\", \""
          << actual.after << "\", \"" << actual.actions << "\"},";
    }
  }
}

}  // namespace
}  // namespace spotvisor::coordination

// The group's decisions (group_fsm.hpp), in the order a node meets them: its membership (the
// lease, the rank, a spare's wait, what the watch reports), the epochs (the join, the
// barrier and the one decision every node makes alike, the one stop per epoch and a peer's,
// the end), and the group's size (shrinking when a rank stays lost, growing back when a
// node joins). Every line here is a decision; the etcd side carries out what it returns.
#include "spotvisor/coordination/group_fsm.hpp"

#include <algorithm>

#include "spotvisor/log/log.hpp"

namespace spotvisor::coordination {

using log::LogLevel;
using log::Quote;
using supervisor::GroupAgreedEvent;
using supervisor::StopReason;
using supervisor::StopRequestedEvent;

namespace {

std::string Ranks(const std::vector<int>& ranks) {
  std::string out;
  for (int r : ranks) out += (out.empty() ? "" : ",") + std::to_string(r);
  return out;
}

std::string Endpoints(const std::vector<std::string>& parts) {
  std::string out;
  for (const auto& p : parts) out += (out.empty() ? "" : ",") + p;
  return out;
}

bool SameProcess(const MemberRecord& a, const MemberRecord& b) {
  return a.pid == b.pid && a.since_unix_ms == b.since_unix_ms;
}

// A txn that moves the decimal counter at `key` from `seen` (0: the key is absent) to `value`,
// and fails if another node moved it first.
etcd::TxnRequest MoveCounter(const std::string& key, std::uint64_t seen, std::uint64_t value) {
  etcd::TxnRequest txn;
  txn.compare.push_back(seen == 0 ? etcd::Compare::Absent(key)
                                  : etcd::Compare::Value(key, etcd::Compare::Result::kEqual, std::to_string(seen)));
  txn.success.emplace_back(etcd::PutRequest{key, std::to_string(value), 0, false});
  return txn;
}

// One of the local Fsm's calls, not news from etcd or a timer.
bool IsCall(const GroupEvent& e) {
  return std::holds_alternative<StartCall>(e) || std::holds_alternative<ProposeCall>(e) ||
         std::holds_alternative<PublishStopCall>(e) || std::holds_alternative<PublishDoneCall>(e) ||
         std::holds_alternative<ReleaseRankCall>(e) || std::holds_alternative<LeaveCall>(e);
}

}  // namespace

GroupFsm::GroupFsm(const config::CoordinationSection& coordination, std::string job_name, MemberRecord me)
    : c_(coordination), base_(GroupPrefix(coordination.prefix, job_name)), me_(std::move(me)) {}

std::vector<GroupAction> GroupFsm::Handle(const GroupEvent& event, GroupNow now) {
  now_ = now;
  out_.clear();
  // Before Start nothing was asked of etcd: only the local Fsm's calls mean anything.
  if (seat_ == Seat::kIdle && !IsCall(event)) return {};
  std::visit(
      [this](const auto& e) {
        using T = std::decay_t<decltype(e)>;
        if constexpr (std::is_same_v<T, StartCall>) OnStart();
        if constexpr (std::is_same_v<T, ProposeCall>) OnPropose(e.proposal);
        if constexpr (std::is_same_v<T, PublishStopCall>) OnPublishStop(e.stop);
        if constexpr (std::is_same_v<T, PublishDoneCall>) OnPublishDone();
        if constexpr (std::is_same_v<T, ReleaseRankCall>) OnReleaseRank();
        if constexpr (std::is_same_v<T, LeaveCall>) OnLeave(e.finished);
        if constexpr (std::is_same_v<T, LeaseGrantedEvent>) OnLeaseGranted(e);
        if constexpr (std::is_same_v<T, LeaseGrantFailedEvent>) {
          if (seat_ == Seat::kLeft) return;
          Trouble("cannot reach etcd at " + Endpoints(c_.etcd), e.error);
          Arm(GroupTimer::kLeaseRetry, kGroupRetry);
        }
        if constexpr (std::is_same_v<T, LeaseLostEvent>) OnLeaseLost(e.error);
        if constexpr (std::is_same_v<T, SnapshotEvent>) OnSnapshot(e);
        if constexpr (std::is_same_v<T, KeysChangedEvent>) OnKeysChanged(e);
        if constexpr (std::is_same_v<T, ConnectionEvent>) OnConnection(e);
        if constexpr (std::is_same_v<T, ClaimAnsweredEvent>) OnClaimAnswered(e);
        if constexpr (std::is_same_v<T, JoinAnsweredEvent>) OnJoinAnswered(e);
        if constexpr (std::is_same_v<T, DoneAnsweredEvent>) OnDoneAnswered(e);
        if constexpr (std::is_same_v<T, StopAnsweredEvent>) OnStopAnswered(e);
        if constexpr (std::is_same_v<T, ShrinkAnsweredEvent>) OnShrinkAnswered(e);
        if constexpr (std::is_same_v<T, FailuresAnsweredEvent>) OnFailuresAnswered(e);
        if constexpr (std::is_same_v<T, WriteFailedEvent>) Trouble(e.trouble, e.error);
        if constexpr (std::is_same_v<T, GroupTimerFiredEvent>) OnTimer(e.timer);
      },
      event);
  return std::move(out_);
}

// ---- the local Fsm's calls ----

void GroupFsm::OnStart() {
  if (seat_ != Seat::kIdle) return;
  seat_ = Seat::kConnecting;
  Say(LogLevel::kInfo,
      "event=group_connecting etcd=" + Quote(Endpoints(c_.etcd)) + " prefix=" + Quote(base_) +
          " nodes=" + std::to_string(c_.nodes) + " spares=" + std::to_string(c_.spares) +
          " node_rank=" + (c_.node_rank == config::kAutoRank ? std::string("auto") : std::to_string(c_.node_rank)));
  Register();
}

void GroupFsm::OnPropose(const supervisor::ProposeResumeAction& proposal) {
  if (seat_ == Seat::kLeft) return;
  Cancel(GroupTimer::kDoneRetry);  // the group did not finish: a peer stopped it
  pending_ = proposal;
  if (course_ != Course::kGrowthHeld) course_ = Course::kProposed;  // held: still, with the new proposal
  running_epoch_ = 0;
  stop_delivered_ = false;
  Say(LogLevel::kInfo, "event=group_waiting nodes=" + std::to_string(c_.nodes) +
                           " good_steps=" + std::to_string(proposal.good.size()) +
                           " detail=\"waiting until every rank has joined the next epoch\"");
  if (seat_ == Seat::kReleased) {  // drained, then the notice cleared: a rank again, or a spare's place
    seat_ = lease_ != 0 ? Seat::kClaiming : Seat::kConnecting;
    if (synced_) ClaimRank();
    return;
  }
  if (seat_ == Seat::kSpare) {
    Do(TellSpareAction{true});
    return;
  }
  if (seat_ == Seat::kHolding && synced_) PublishJoin();
}

void GroupFsm::OnPublishStop(const supervisor::PublishStopAction& stop) {
  if (seat_ == Seat::kLeft) return;
  if (stop.failures) RaiseFailures(*stop.failures);
  if (!InEpoch()) {
    // Not started yet: take back this node's join, so that the group does not start without it.
    if (pending_ && join_epoch_ != 0)
      Do(WriteAction{etcd::DeleteRangeRequest{JoinKey(base_, join_epoch_, rank_), "", false}, ""});
    pending_.reset();
    join_epoch_ = 0;
    course_ = Course::kNone;
    return;
  }
  const StopRecord record{rank_, stop.why, stop.grace_cap ? UnixMillis(now_.wall) + stop.grace_cap->count() : 0};
  etcd::TxnRequest txn;
  const std::string key = StopKey(base_, running_epoch_);
  txn.compare.push_back(etcd::Compare::Absent(key));
  txn.success.emplace_back(etcd::PutRequest{key, Encode(record), 0, false});
  Do(PublishStopTxnAction{running_epoch_, stop.why, std::move(txn)});
}

void GroupFsm::OnPublishDone() {
  if (seat_ == Seat::kLeft || !InEpoch()) return;
  course_ = Course::kFinishing;
  Do(PutDoneAction{running_epoch_, etcd::PutRequest{DoneKey(base_, running_epoch_, rank_), "{}", 0, false}});
}

void GroupFsm::OnReleaseRank() {
  if (seat_ == Seat::kLeft || seat_ == Seat::kIdle) return;
  Cancel(GroupTimer::kClaimRetry);
  Cancel(GroupTimer::kJoinRetry);
  if (pending_ && join_epoch_ != 0 && seat_ == Seat::kHolding)
    Do(WriteAction{etcd::DeleteRangeRequest{JoinKey(base_, join_epoch_, rank_), "", false}, ""});
  pending_.reset();
  join_epoch_ = 0;
  running_epoch_ = 0;  // what happens to the group now is no longer this node's to stop
  course_ = Course::kNone;
  const Seat was = seat_;
  seat_ = Seat::kReleased;
  if (was == Seat::kSpare) {
    Do(WriteAction{etcd::DeleteRangeRequest{SpareKey(base_, lease_), "", false}, ""});
    Say(LogLevel::kInfo, "event=spare_left detail=\"drained: no longer waiting for a rank\"");
  }
  if (was != Seat::kHolding) return;
  etcd::TxnRequest txn;
  const std::string key = MemberKey(base_, rank_);
  txn.compare.push_back(etcd::Compare::Value(key, etcd::Compare::Result::kEqual, Encode(me_)));
  txn.success.emplace_back(etcd::DeleteRangeRequest{key, "", false});
  Say(LogLevel::kInfo, "event=group_rank_released rank=" + std::to_string(rank_) +
                           " detail=\"drained for a notice: a spare can take the rank now\"");
  rank_ = -1;
  Do(WriteAction{std::move(txn), "cannot give up this node's rank (its lease lapses when the machine goes)"});
}

void GroupFsm::OnLeave(bool finished) {
  if (seat_ == Seat::kLeft) return;
  const bool held = seat_ == Seat::kHolding;
  const bool in_epoch = InEpoch();
  seat_ = Seat::kLeft;
  course_ = Course::kNone;
  for (GroupTimer t : kGroupTimers) armed_[t] = false;
  CloseAction close;
  close.lease = lease_;
  if (lease_ != 0) {
    Say(LogLevel::kInfo,
        "event=group_left rank=" + std::to_string(rank_) + " finished=" + (finished ? "true" : "false"));
    // First the done, then the member key goes: the peers read them in that order.
    if (finished && in_epoch && held)
      close.done = etcd::PutRequest{DoneKey(base_, running_epoch_, rank_), "{}", 0, false};
  }
  Do(std::move(close));
}

// ---- membership ----

// A lease, then the view of the group (its snapshot claims the rank).
void GroupFsm::Register() {
  if (seat_ == Seat::kLeft || lease_ != 0) return;
  Do(GrantLeaseAction{std::chrono::duration_cast<std::chrono::seconds>(c_.lease_ttl).count()});
}

void GroupFsm::OnLeaseGranted(const LeaseGrantedEvent& e) {
  if (seat_ == Seat::kLeft || lease_ != 0) return;  // granted only after GrantLeaseAction, with none held
  lease_ = e.id;
  if (seat_ == Seat::kConnecting) seat_ = Seat::kClaiming;
  Do(KeepLeaseAction{e.id, e.ttl_s});
  if (watching_) {
    ClaimRank();
    return;
  }
  watching_ = true;
  Do(WatchGroupAction{base_});
}

void GroupFsm::OnLeaseLost(const Error& e) {
  if (seat_ == Seat::kLeft) return;
  // Claiming while in an epoch: the watch told of its own key's end before the keepalive told
  // of the lease's (a node stopped past its TTL hears both at once when it runs again), and it
  // tried to take the rank back under the lapsed lease. Its trainer was cut off all the same.
  const bool trainer = InEpoch() && (seat_ == Seat::kHolding || seat_ == Seat::kClaiming);
  Say(LogLevel::kError, "event=group_lease_lost rank=" + std::to_string(rank_) + " error=" + Quote(e.message) +
                            " detail=\"" +
                            (trainer ? "the rank can be taken now: the trainer goes on only if it progresses; " : "") +
                            "taking the rank again under a new lease\"");
  if (trainer) Do(TellCutOffAction{});
  lease_ = 0;
  Do(DropLeaseAction{});
  // Its keys went with the lease: a rank (or a spare's place) is claimed again under the new one.
  if (seat_ != Seat::kReleased) seat_ = Seat::kConnecting;
  Arm(GroupTimer::kLeaseRetry, Duration::zero());
}

void GroupFsm::ClaimRank() {
  if (lease_ == 0 || claiming_ || (seat_ != Seat::kClaiming && seat_ != Seat::kSpare)) return;
  int want = rank_ >= 0 ? rank_ : c_.node_rank;
  if (want == config::kAutoRank) {
    // A rank whose trainer finished in the newest epoch is not free: its node left at the
    // job's end, and a newcomer (a spare) must not start the job again.
    auto held = view_.members;
    if (const auto finished = view_.done.find(view_.epoch); finished != view_.done.end()) {
      for (int rank : finished->second) held.emplace(rank, MemberRecord{});
    }
    const auto free = LowestFreeRank(held, c_.nodes);
    if (!free) {
      if (c_.spares > 0) {
        BecomeSpare();
      } else {
        Trouble("all " + std::to_string(c_.nodes) + " ranks are held; waiting for one to be free",
                Error{"coordination.nodes = " + std::to_string(c_.nodes)});
      }
      Arm(GroupTimer::kClaimRetry, kGroupRetry);
      return;
    }
    want = *free;
  }
  const std::string key = MemberKey(base_, want);
  etcd::TxnRequest txn;
  // Free, or held by this very supervisor under a lease it lost (etcd was away).
  const auto held = view_.members.find(want);
  if (held != view_.members.end() && SameProcess(held->second, me_)) {
    txn.compare.push_back(etcd::Compare::Value(key, etcd::Compare::Result::kEqual, Encode(held->second)));
  } else {
    txn.compare.push_back(etcd::Compare::Absent(key));
  }
  txn.success.emplace_back(etcd::PutRequest{key, Encode(me_), lease_, false});
  claiming_ = true;
  Do(ClaimAction{want, std::move(txn)});
}

void GroupFsm::OnClaimAnswered(const ClaimAnsweredEvent& e) {
  claiming_ = false;
  if (seat_ != Seat::kClaiming && seat_ != Seat::kSpare) return;  // left, drained, or its lease lapsed meanwhile
  if (!e.succeeded) {
    Trouble("cannot claim rank " + std::to_string(e.rank), e.succeeded.error());
    Arm(GroupTimer::kClaimRetry, kGroupRetry);
    return;
  }
  if (*e.succeeded) {
    OnClaimed(e.rank);
    return;
  }
  const auto holder = view_.members.find(e.rank);
  if (e.rank == rank_ && (c_.node_rank == config::kAutoRank || InEpoch()) && holder != view_.members.end() &&
      !SameProcess(holder->second, me_)) {
    OnRankTaken(e.rank, holder->second);
    return;
  }
  Trouble("rank " + std::to_string(e.rank) + " is held by another node; waiting for it to be free",
          Error{"key " + MemberKey(base_, e.rank)});
  Arm(GroupTimer::kClaimRetry, kGroupRetry);
}

void GroupFsm::OnClaimed(int rank) {
  rank_ = rank;
  const bool was_spare = seat_ == Seat::kSpare;
  seat_ = Seat::kHolding;
  trouble_.clear();
  if (was_spare) Do(WriteAction{etcd::DeleteRangeRequest{SpareKey(base_, lease_), "", false}, ""});
  Say(LogLevel::kInfo, "event=group_joined rank=" + std::to_string(rank_) + " nodes=" + std::to_string(c_.nodes) +
                           " advertise=" + Quote(me_.advertise) + " lease_ttl=" + FormatDuration(c_.lease_ttl) +
                           (was_spare ? " from=spare" : ""));
  if (was_spare && pending_) {
    // Proposed while waiting: the checkpoints may have changed since (the lost rank's last
    // save). The Fsm selects again and proposes anew.
    pending_.reset();
    course_ = Course::kNone;
    Do(TellSpareAction{false});
    return;
  }
  if (pending_) PublishJoin();
}

void GroupFsm::OnRankTaken(int rank, const MemberRecord& holder) {
  const bool running = InEpoch();
  Say(LogLevel::kError, "event=group_rank_taken rank=" + std::to_string(rank) + " holder=" + Quote(holder.host) +
                            " holder_advertise=" + Quote(holder.advertise) + " detail=\"" +
                            (running ? "this node's trainer of that rank stops now; " : "") +
                            "the rank went to another node while this node was cut off\"");
  if (running) {
    StopTrainerOnce("rank " + std::to_string(rank) + " was taken by " + holder.host + " (" + holder.advertise +
                        ") while this node was cut off",
                    std::nullopt);
  }
  if (running) course_ = Course::kNone;
  running_epoch_ = 0;
  if (c_.node_rank == config::kAutoRank) rank_ = -1;  // a free rank, or a spare's wait
  Arm(GroupTimer::kClaimRetry, kGroupRetry);
}

void GroupFsm::BecomeSpare() {
  if (seat_ == Seat::kSpare) return;
  seat_ = Seat::kSpare;
  Do(WriteAction{etcd::PutRequest{SpareKey(base_, lease_), Encode(me_), lease_, false},
                 "cannot tell the group that this node waits as a spare"});
  Say(LogLevel::kInfo, "event=spare_waiting nodes=" + std::to_string(c_.nodes) +
                           " spares=" + std::to_string(view_.spares.size() + 1) + " of=" + std::to_string(c_.spares) +
                           " detail=\"every rank is held; taking the first one lost\"");
  if (view_.spares.size() + 1 > static_cast<std::size_t>(c_.spares)) {
    Say(LogLevel::kWarning, "event=spares_beyond_config spares=" + std::to_string(view_.spares.size() + 1) +
                                " coordination_spares=" + std::to_string(c_.spares) +
                                " detail=\"more nodes wait than coordination.spares says; this one waits too\"");
  }
  if (pending_) Do(TellSpareAction{true});
  CheckSpareFinished();
}

void GroupFsm::OnSnapshot(const SnapshotEvent& e) {
  if (seat_ == Seat::kLeft) return;
  view_ = GroupView{};
  for (const auto& kv : e.kvs) Apply(kv, false);
  synced_ = true;
  ClaimRank();
  Evaluate();
  CheckFinished();
  CheckLeftBehind();
}

void GroupFsm::OnKeysChanged(const KeysChangedEvent& e) {
  if (seat_ == Seat::kLeft) return;
  for (const auto& event : e.events) Apply(event.kv, event.type == etcd::Event::Type::kDelete);
  Evaluate();
  CheckFinished();
  CheckLeftBehind();
}

void GroupFsm::OnConnection(const ConnectionEvent& e) {
  if (seat_ == Seat::kLeft) return;
  if (e.connected) {
    if (!trouble_.empty()) Say(LogLevel::kInfo, "event=group_reconnected etcd=" + Quote(Endpoints(c_.etcd)));
    trouble_.clear();
  } else {
    Trouble("lost the watch on the group", Error{e.why});
  }
}

void GroupFsm::Apply(const etcd::KeyValue& kv, bool deleted) {
  const ParsedKey key = ParseKey(base_, kv.key);
  if (!Fold(view_, key, kv.value, deleted)) return;
  const bool member = key.kind == ParsedKey::Kind::kMember;
  if ((seat_ == Seat::kSpare || course_ == Course::kGrowthHeld) && (key.kind == ParsedKey::Kind::kDone || member))
    CheckSpareFinished();
  ReleaseForGrowth(key, deleted);
  // A member key said again (not a claim: HoldForGrowth, once the node has selected).
  if (member && !deleted && kv.version > 1) GrowFor(key.rank);
  if (member && deleted) {
    OnMemberGone(key.rank);
  } else if (key.kind == ParsedKey::Kind::kStop && !deleted && InEpoch() && key.epoch == running_epoch_) {
    const StopRecord& s = view_.stops.at(key.epoch);
    if (s.rank != rank_) PeerStop(s.rank, s.why, s.deadline_unix_ms);
  }
}

void GroupFsm::OnMemberGone(int rank) {
  const auto finished = view_.done.find(view_.epoch);
  const bool rank_done = finished != view_.done.end() && finished->second.count(rank) != 0;
  // A rank is lost: a spare takes it at once, not at the next retry. One whose trainer
  // finished is not lost: the job is ending.
  if (seat_ == Seat::kSpare && !rank_done) ClaimRank();
  if (rank == rank_) {
    // Our own key is gone though our lease is not known lost: claim it again.
    if (seat_ == Seat::kHolding && lease_ != 0) {
      seat_ = Seat::kClaiming;
      ClaimRank();
    }
    return;
  }
  if (!Runs(rank)) return;  // not a peer of the running (shrunken) epoch
  const auto done = view_.done.find(running_epoch_);
  if (done != view_.done.end() && done->second.count(rank) != 0) {
    Say(LogLevel::kInfo,
        "event=peer_finished rank=" + std::to_string(rank) + " epoch=" + std::to_string(running_epoch_));
  } else {
    PeerStop(rank, "left the group (its lease lapsed)", 0);
  }
}

void GroupFsm::CheckSpareFinished() {
  if (spare_finished_told_ || view_.epoch == 0) return;
  const auto finished = view_.done.find(view_.epoch);
  if (finished == view_.done.end() || finished->second.size() < EpochRanks(view_, view_.epoch, c_.nodes).size()) return;
  Say(LogLevel::kInfo, "event=spare_done epoch=" + std::to_string(view_.epoch) +
                           " detail=\"every rank's trainer succeeded: the job is done, and this spare with it\"");
  spare_finished_told_ = true;
  Do(TellSpareFinishedAction{});
}

// ---- the epochs ----

void GroupFsm::PublishJoin() {
  if (seat_ != Seat::kHolding || !pending_) return;
  if (AwaitsGrowth()) {
    HoldForGrowth();
    return;
  }
  std::uint64_t epoch = std::max(view_.epoch, last_epoch_) + 1;
  for (const auto& [e, joined] : view_.joins) {
    if (e > epoch && !joined.empty()) epoch = e;
  }
  while (Skips(epoch)) ++epoch;
  if (epoch == join_epoch_) return;
  Cancel(GroupTimer::kShrink);
  shrink_seen_ = 0;
  JoinRecord record;
  for (const auto& p : pending_->good) record.steps.push_back(p.step);
  const auto previous = join_epoch_;
  join_epoch_ = epoch;
  Do(PutJoinAction{epoch, previous, etcd::PutRequest{JoinKey(base_, epoch, rank_), Encode(record), lease_, false}});
}

void GroupFsm::OnJoinAnswered(const JoinAnsweredEvent& e) {
  if (seat_ == Seat::kLeft) return;
  if (e.error) {
    if (e.epoch != join_epoch_) return;  // an older join: this node has moved on since
    Trouble("cannot join epoch " + std::to_string(e.epoch), *e.error);
    join_epoch_ = e.previous;
    Arm(GroupTimer::kJoinRetry, kGroupRetry);
    return;
  }
  if (e.previous != 0 && e.previous != e.epoch)
    Do(WriteAction{etcd::DeleteRangeRequest{JoinKey(base_, e.previous, rank_), "", false}, ""});
  Evaluate();
}

void GroupFsm::Evaluate() {
  if (!pending_ || join_epoch_ == 0) return;
  for (const auto& [e, joined] : view_.joins) {
    if (e > join_epoch_ && !joined.empty()) {
      PublishJoin();  // others wait in a later epoch: go there
      return;
    }
  }
  if (Skips(join_epoch_)) {
    PublishJoin();
    return;
  }
  const auto it = view_.joins.find(join_epoch_);
  if (it == view_.joins.end() || it->second.count(rank_) == 0) return;
  const auto ranks = EpochRanks(view_, join_epoch_, c_.nodes);
  if (!GroupComplete(it->second, ranks)) {
    WatchForShrink(it->second);
    return;
  }
  Agree(ranks, it->second);
}

void GroupFsm::Agree(const std::vector<int>& ranks, const std::map<int, JoinRecord>& joined) {
  Cancel(GroupTimer::kShrink);
  GroupAgreedEvent agreed;
  if (const auto step = AgreedStep(joined, ranks)) {
    for (const auto& p : pending_->good) {
      if (p.step == *step) agreed.point = p;
    }
  }
  // A shrunken group trains as places 0..n-1 in rank order; its lowest rank is the master.
  const auto master = view_.members.find(ranks.front());
  agreed.place.rank = static_cast<int>(std::find(ranks.begin(), ranks.end(), rank_) - ranks.begin());
  agreed.place.world = static_cast<int>(ranks.size());
  agreed.place.epoch = join_epoch_;
  agreed.place.master_addr =
      ranks.front() == rank_ || master == view_.members.end() ? me_.advertise : master->second.advertise;
  agreed.place.master_port = c_.master_port;
  agreed.group_failures = view_.failures;
  running_epoch_ = join_epoch_;
  epoch_lease_ = lease_;
  running_ranks_ = ranks;
  last_epoch_ = join_epoch_;
  join_epoch_ = 0;
  pending_.reset();
  course_ = Course::kRunning;
  stop_delivered_ = false;
  grow_told_ = false;
  Say(LogLevel::kInfo, "event=group_agreed epoch=" + std::to_string(running_epoch_) + " rank=" + std::to_string(rank_) +
                           " nodes=" + std::to_string(agreed.place.world) +
                           (agreed.place.world < c_.nodes
                                ? " of=" + std::to_string(c_.nodes) + " place=" + std::to_string(agreed.place.rank)
                                : std::string()) +
                           " step=" + (agreed.point ? std::to_string(agreed.point->step) : std::string("none")) +
                           " master_addr=" + Quote(agreed.place.master_addr));
  AdvanceEpochKey(running_epoch_);
  Do(TellAgreedAction{std::move(agreed)});
  // A peer may have stopped this epoch before this node heard of the agreement.
  if (auto s = view_.stops.find(running_epoch_); s != view_.stops.end() && s->second.rank != rank_) {
    PeerStop(s->second.rank, s->second.why, s->second.deadline_unix_ms);
  }
}

void GroupFsm::AdvanceEpochKey(std::uint64_t epoch) {
  if (epoch <= view_.epoch) return;
  // Another node may have moved it first: nothing to do then.
  Do(WriteAction{MoveCounter(EpochKey(base_), view_.epoch, epoch), ""});
}

void GroupFsm::RaiseFailures(int count) {
  if (count <= view_.failures) return;
  Do(RaiseFailuresAction{count, MoveCounter(FailuresKey(base_), static_cast<std::uint64_t>(view_.failures),
                                            static_cast<std::uint64_t>(count))});
}

void GroupFsm::OnFailuresAnswered(const FailuresAnsweredEvent& e) {
  if (!e.succeeded) {
    Trouble("could not count this node's failure for the job", e.succeeded.error());
    return;
  }
  if (!*e.succeeded) return;
  view_.failures = std::max(view_.failures, e.count);
  Say(LogLevel::kInfo, "event=group_failures count=" + std::to_string(e.count));
}

void GroupFsm::OnStopAnswered(const StopAnsweredEvent& e) {
  if (!e.first) {
    Trouble("could not tell the group of this node's stop", e.first.error());
    return;
  }
  Say(LogLevel::kInfo, "event=group_stop_published epoch=" + std::to_string(e.epoch) + " why=" + Quote(e.why) +
                           " first=" + (*e.first ? "true" : "false"));
}

void GroupFsm::OnDoneAnswered(const DoneAnsweredEvent& e) {
  if (seat_ == Seat::kLeft || course_ != Course::kFinishing || e.epoch != running_epoch_) return;
  if (e.error) {
    Trouble("cannot tell the group that this node's trainer finished", *e.error);
    Arm(GroupTimer::kDoneRetry, kGroupRetry);
    return;
  }
  CheckFinished();  // the watch brings it too; whichever comes first answers
}

void GroupFsm::CheckFinished() {
  if (course_ != Course::kFinishing) return;
  const auto done = view_.done.find(running_epoch_);
  if (done == view_.done.end()) return;
  for (int r : running_ranks_) {
    if (done->second.count(r) == 0) return;
  }
  Say(LogLevel::kInfo, "event=group_finished epoch=" + std::to_string(running_epoch_) + " nodes=" +
                           std::to_string(running_ranks_.size()) + " detail=\"every node's trainer finished\"");
  course_ = Course::kFinished;
  Do(TellFinishedAction{});
}

void GroupFsm::CheckLeftBehind() {
  if (!InEpoch() || course_ == Course::kFinished || stop_delivered_ || view_.epoch <= running_epoch_) return;
  const std::string newest = std::to_string(view_.epoch);
  const std::string mine = std::to_string(running_epoch_);
  Say(LogLevel::kWarning, "event=group_left_behind epoch=" + mine + " group_epoch=" + newest +
                              " rank=" + std::to_string(rank_) + " detail=\"the group started epoch " + newest +
                              " without this node: its trainer of epoch " + mine +
                              " trains for nobody and stops; the node then joins the group again\"");
  StopTrainerOnce("the group started epoch " + newest + " without this node (cut off from it meanwhile): its " +
                      "trainer of epoch " + mine + " stops",
                  std::nullopt);
}

void GroupFsm::StopTrainerOnce(const std::string& why, std::optional<std::chrono::milliseconds> grace_cap) {
  if (stop_delivered_) return;
  stop_delivered_ = true;
  Do(TellPeerStopAction{StopRequestedEvent{StopReason::kPeer, grace_cap, why}});
}

void GroupFsm::PeerStop(int rank, const std::string& cause, std::int64_t deadline_unix_ms) {
  if (!InEpoch() || stop_delivered_) return;
  const std::string why = "node " + std::to_string(rank) + ": " + cause;
  std::optional<std::chrono::milliseconds> cap;
  if (deadline_unix_ms > 0)
    cap = std::chrono::milliseconds(std::max<std::int64_t>(0, deadline_unix_ms - UnixMillis(now_.wall)));
  Say(LogLevel::kWarning, "event=peer_stop epoch=" + std::to_string(running_epoch_) + " rank=" + std::to_string(rank) +
                              " why=" + Quote(why) + (cap ? " grace_cap=" + FormatDuration(*cap) : std::string()));
  StopTrainerOnce(why, cap);
}

// ---- the group's size ----

bool GroupFsm::Runs(int rank) const {
  return InEpoch() && std::find(running_ranks_.begin(), running_ranks_.end(), rank) != running_ranks_.end();
}

void GroupFsm::WatchForShrink(const std::map<int, JoinRecord>& joined) {
  if (!c_.shrinks() || view_.shrinks.count(join_epoch_) != 0) return;
  if (joined.size() == shrink_seen_ && armed_[GroupTimer::kShrink]) return;
  // Counted from the last join: the nodes of a group that stopped together join within
  // seconds, and a replacement that is about to join is not cut out.
  shrink_seen_ = joined.size();
  // The group ran shrunken with exactly these ranks and the missing ones are still gone (a
  // crash or a stop of the shrunken group): waiting again would only idle it.
  const auto before = view_.shrinks.find(view_.epoch);
  bool as_before = before != view_.shrinks.end() && before->second.size() == joined.size();
  if (as_before) {
    for (int r : before->second) as_before = as_before && joined.count(r) != 0;
    for (int r = 0; r < c_.nodes; ++r) as_before = as_before && (joined.count(r) != 0 || view_.members.count(r) == 0);
  }
  // Said each time the count starts (again): the group is not idle for nothing, and a test
  // on a virtual clock knows when the watch has brought this node the last join.
  const Duration wait = as_before ? Duration::zero() : c_.shrink_after;
  std::vector<int> ranks;
  for (const auto& [rank, record] : joined) ranks.push_back(rank);
  Say(LogLevel::kInfo, "event=group_shrink_pending rank=" + std::to_string(rank_) +
                           " epoch=" + std::to_string(join_epoch_) + " joined=" + Ranks(ranks) +
                           " shrink_in=" + FormatDuration(wait) +
                           " detail=\"a rank is missing: without a node for it by then, the group starts with fewer\"");
  Arm(GroupTimer::kShrink, wait);
}

void GroupFsm::Shrink() {
  if (!pending_ || join_epoch_ == 0 || seat_ != Seat::kHolding || view_.shrinks.count(join_epoch_) != 0) return;
  const auto it = view_.joins.find(join_epoch_);
  if (it == view_.joins.end() || it->second.count(rank_) == 0) return;
  std::vector<int> ranks;
  std::vector<int> missing;
  for (int r = 0; r < c_.nodes; ++r) (it->second.count(r) != 0 ? ranks : missing).push_back(r);
  if (missing.empty()) return;
  if (ranks.size() < static_cast<std::size_t>(c_.min_nodes)) {
    Say(LogLevel::kInfo, "event=group_too_small epoch=" + std::to_string(join_epoch_) +
                             " joined=" + std::to_string(ranks.size()) + " min_nodes=" + std::to_string(c_.min_nodes) +
                             " detail=\"fewer than coordination.min_nodes: waiting for a node to join\"");
    return;
  }
  // Written once, and only while no missing rank has joined: a replacement that just came
  // makes the txn fail, and the group starts whole.
  etcd::TxnRequest txn;
  const std::string key = ShrinkKey(base_, join_epoch_);
  txn.compare.push_back(etcd::Compare::Absent(key));
  for (int r : missing) txn.compare.push_back(etcd::Compare::Absent(JoinKey(base_, join_epoch_, r)));
  txn.success.emplace_back(etcd::PutRequest{key, Encode(ShrinkRecord{ranks}), 0, false});
  Do(ShrinkAction{join_epoch_, ranks, missing, std::move(txn)});
}

void GroupFsm::OnShrinkAnswered(const ShrinkAnsweredEvent& e) {
  if (seat_ == Seat::kLeft) return;
  if (!e.succeeded) {
    Trouble("cannot shrink the group for epoch " + std::to_string(e.epoch), e.succeeded.error());
    if (e.epoch == join_epoch_) Arm(GroupTimer::kShrink, kGroupRetry);
    return;
  }
  if (!*e.succeeded) return;  // another node wrote it first, or a replacement joined: the watch brings either
  Say(LogLevel::kWarning, "event=group_shrinking epoch=" + std::to_string(e.epoch) +
                              " nodes=" + std::to_string(e.ranks.size()) + " of=" + std::to_string(c_.nodes) +
                              " ranks=" + Ranks(e.ranks) + " missing=" + Ranks(e.missing) +
                              " detail=\"no node came for the missing rank within coordination.shrink_after (" +
                              FormatDuration(c_.shrink_after) + "): training on with fewer nodes\"");
}

bool GroupFsm::Skips(std::uint64_t epoch) const {
  const auto it = view_.shrinks.find(epoch);
  if (it == view_.shrinks.end() || epoch <= view_.epoch) return false;
  const auto& ranks = it->second;
  if (std::find(ranks.begin(), ranks.end(), rank_) == ranks.end()) return true;
  return std::any_of(ranks.begin(), ranks.end(), [this](int r) { return view_.members.count(r) == 0; });
}

void GroupFsm::GrowFor(int rank) {
  if (!InEpoch() || rank == rank_ || Runs(rank)) return;
  if (running_ranks_.size() >= static_cast<std::size_t>(c_.nodes)) return;
  if (grow_told_) return;  // once per epoch: the group stops once for it
  grow_told_ = true;
  Say(LogLevel::kInfo, "event=group_growing epoch=" + std::to_string(running_epoch_) +
                           " nodes=" + std::to_string(running_ranks_.size()) + " of=" + std::to_string(c_.nodes) +
                           " joined_rank=" + std::to_string(rank) +
                           " detail=\"a node joined the shrunken group: checkpoint, then start again with it\"");
  Do(TellGrowAction{"node " + std::to_string(rank) + ": joined the shrunken group: it grows back at a checkpoint"});
}

bool GroupFsm::AwaitsGrowth() const {
  const auto shrunk = view_.shrinks.find(view_.epoch);
  if (shrunk == view_.shrinks.end() || last_epoch_ >= view_.epoch) return false;
  const auto& ranks = shrunk->second;
  if (std::find(ranks.begin(), ranks.end(), rank_) != ranks.end()) return false;
  if (view_.stops.count(view_.epoch) != 0) return false;  // stopped already: join as usual
  const auto later = view_.joins.upper_bound(view_.epoch);
  return later == view_.joins.end();  // nobody regroups yet
}

void GroupFsm::HoldForGrowth() {
  if (course_ == Course::kGrowthHeld) return;
  course_ = Course::kGrowthHeld;
  const auto& ranks = view_.shrinks.at(view_.epoch);
  Say(LogLevel::kInfo, "event=group_grow_waiting rank=" + std::to_string(rank_) +
                           " epoch=" + std::to_string(view_.epoch) + " nodes=" + std::to_string(ranks.size()) +
                           " of=" + std::to_string(c_.nodes) +
                           " detail=\"the group trains shrunken: it stops at a checkpoint, then this node selects "
                           "again and joins\"");
  // Said again under the lease: the running nodes hear of this node even when its rank was
  // held all along (a drained node whose notice cleared).
  Do(WriteAction{etcd::PutRequest{MemberKey(base_, rank_), Encode(me_), lease_, false},
                 "cannot tell the shrunken group that this node is back"});
  Do(TellSpareAction{true});
  CheckSpareFinished();
}

void GroupFsm::ReleaseForGrowth(const ParsedKey& key, bool deleted) {
  if (course_ != Course::kGrowthHeld || deleted) return;
  const bool regroups = (key.kind == ParsedKey::Kind::kJoin && key.epoch > view_.epoch) ||
                        (key.kind == ParsedKey::Kind::kStop && key.epoch == view_.epoch);
  if (!regroups) return;
  course_ = Course::kNone;
  pending_.reset();
  Say(LogLevel::kInfo, "event=group_grow_ready rank=" + std::to_string(rank_) +
                           " detail=\"the shrunken group stopped: selecting again, then joining it\"");
  Do(TellSpareAction{false});
}

// ---- timers and output ----

void GroupFsm::OnTimer(GroupTimer timer) {
  armed_[timer] = false;
  switch (timer) {
    case GroupTimer::kLeaseRetry:
      Register();
      break;
    case GroupTimer::kClaimRetry:
      ClaimRank();
      break;
    case GroupTimer::kJoinRetry:
      PublishJoin();
      break;
    case GroupTimer::kDoneRetry:
      if (course_ == Course::kFinishing) OnPublishDone();
      break;
    case GroupTimer::kShrink:
      Shrink();
      break;
  }
}

void GroupFsm::Arm(GroupTimer timer, Duration after) {
  armed_[timer] = true;
  Do(ArmGroupTimerAction{timer, after});
}

void GroupFsm::Cancel(GroupTimer timer) {
  if (!armed_[timer]) return;
  armed_[timer] = false;
  Do(CancelGroupTimerAction{timer});
}

void GroupFsm::Trouble(const std::string& what, const Error& e) {
  auto& last = trouble_[what];
  if (last != SteadyTime{} && now_.steady - last < kTroubleEvery) return;
  last = now_.steady;
  Say(LogLevel::kWarning, "event=group_trouble what=" + Quote(what) + " error=" + Quote(e.message) +
                              " detail=\"training goes on; spotvisor keeps trying\"");
}

const char* SeatName(Seat seat) {
  switch (seat) {
    case Seat::kIdle:
      return "idle";
    case Seat::kConnecting:
      return "connecting";
    case Seat::kClaiming:
      return "claiming";
    case Seat::kSpare:
      return "spare";
    case Seat::kHolding:
      return "holding";
    case Seat::kReleased:
      return "released";
    case Seat::kLeft:
      return "left";
  }
  return "?";
}

const char* CourseName(Course course) {
  switch (course) {
    case Course::kNone:
      return "none";
    case Course::kProposed:
      return "proposed";
    case Course::kGrowthHeld:
      return "growth_held";
    case Course::kRunning:
      return "running";
    case Course::kFinishing:
      return "finishing";
    case Course::kFinished:
      return "finished";
  }
  return "?";
}

const char* GroupTimerName(GroupTimer timer) {
  switch (timer) {
    case GroupTimer::kLeaseRetry:
      return "lease_retry";
    case GroupTimer::kClaimRetry:
      return "claim_retry";
    case GroupTimer::kJoinRetry:
      return "join_retry";
    case GroupTimer::kDoneRetry:
      return "done_retry";
    case GroupTimer::kShrink:
      return "shrink";
  }
  return "?";
}

}  // namespace spotvisor::coordination

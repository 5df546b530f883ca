// The group's side of a multi-node job as a state machine without I/O, in the style of the
// supervisor's Fsm (supervisor/fsm.hpp): it takes an event (a call of the local Fsm through
// the Coordinator interface, an etcd answer, a watch event, a lease result, a timer) with the
// time, and returns the actions to carry out (requests to send, timers to arm, events to
// hand the local Fsm, lines to log). The etcd side (etcd_coordinator.cpp) sends the requests
// and feeds their answers back; every decision is here, and tests drive it with tables.
//
// Two things describe where a node stands, and they change apart:
//   Seat   — its place in the group: connecting (no lease), claiming a rank, a spare,
//            holding a rank, drained (its rank given up), left;
//   Course — the start it is in: none, proposed (its join published, waiting for every
//            rank), held for growth (outside a shrunken group that still runs), running the
//            agreed epoch, finishing (its trainer succeeded; waiting for every rank's).
// A node can run and reclaim its rank at once (its lease lapsed while its trainer ran), or
// wait as a spare with a proposal: hence two enums, not one. Keys and records: records.hpp.
// Single-threaded.
#pragma once

#include <chrono>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <variant>
#include <vector>

#include "spotvisor/config/job_config.hpp"
#include "spotvisor/coordination/records.hpp"
#include "spotvisor/etcd/types.hpp"
#include "spotvisor/supervisor/fsm.hpp"
#include "spotvisor/util/clock.hpp"
#include "spotvisor/util/result.hpp"

namespace spotvisor::coordination {

enum class Seat {
  kIdle,        // Start not called yet
  kConnecting,  // no lease: its grant in flight, or the retry armed (etcd away, or the lease lapsed)
  kClaiming,    // a lease: claiming a rank (its txn in flight, or waiting for a free one)
  kSpare,       // every rank held and coordination.spares allows it: waiting as spares/<lease>
  kHolding,     // members/<rank> is this node's under its lease
  kReleased,    // drained (ReleaseRank): no claim until the next Propose
  kLeft,        // Leave: terminal
};

enum class Course {
  kNone,        // nothing proposed, nothing running
  kProposed,    // a proposal waits for the group (its join published once a rank is held)
  kGrowthHeld,  // proposed, but the group runs shrunken without this node: wait until it stops
  kRunning,     // the agreed epoch runs
  kFinishing,   // this node's trainer succeeded: waiting for every rank's done
  kFinished,    // every rank's trainer succeeded
};

// The group's timers, one per thing it waits for.
enum class GroupTimer {
  kLeaseRetry,  // the next lease grant after trouble (or at once after a lapsed lease)
  kClaimRetry,  // the next claim: a rank was held, or etcd answered with trouble
  kJoinRetry,   // the next write of this node's join
  kDoneRetry,   // the next write of this node's done
  kShrink,      // coordination.shrink_after since the last join: start with fewer
};
inline constexpr GroupTimer kGroupTimers[] = {GroupTimer::kLeaseRetry, GroupTimer::kClaimRetry, GroupTimer::kJoinRetry,
                                              GroupTimer::kDoneRetry, GroupTimer::kShrink};

// ---- events: the local Fsm's calls (coordinator.hpp) ----
struct StartCall {};
struct ProposeCall {
  supervisor::ProposeResumeAction proposal;
};
struct PublishStopCall {
  supervisor::PublishStopAction stop;
};
struct PublishDoneCall {};
struct ReleaseRankCall {};
struct LeaveCall {
  bool finished = false;
};
// ---- events: etcd's answers, the watch, the lease ----
struct LeaseGrantedEvent {
  std::int64_t id = 0;
  std::int64_t ttl_s = 0;
};
struct LeaseGrantFailedEvent {
  Error error;
};
struct LeaseLostEvent {  // the keeper could not renew it
  Error error;
};
struct SnapshotEvent {  // the watch's (re)read of everything under the job's prefix
  std::vector<etcd::KeyValue> kvs;
};
struct KeysChangedEvent {  // the watch's events, in order
  std::vector<etcd::Event> events;
};
struct ConnectionEvent {  // the watch's stream
  bool connected = false;
  std::string why;
};
struct ClaimAnsweredEvent {  // ClaimAction's txn: succeeded or not
  int rank = -1;
  Result<bool> succeeded;
};
struct JoinAnsweredEvent {  // PutJoinAction's put
  std::uint64_t epoch = 0;
  std::uint64_t previous = 0;
  std::optional<Error> error;
};
struct DoneAnsweredEvent {  // PutDoneAction's put
  std::uint64_t epoch = 0;
  std::optional<Error> error;
};
struct StopAnsweredEvent {  // PublishStopTxnAction's txn: first or not
  std::uint64_t epoch = 0;
  std::string why;
  Result<bool> first;
};
struct ShrinkAnsweredEvent {  // ShrinkAction's txn
  std::uint64_t epoch = 0;
  std::vector<int> ranks;
  std::vector<int> missing;
  Result<bool> succeeded;
};
struct FailuresAnsweredEvent {  // RaiseFailuresAction's txn
  int count = 0;
  Result<bool> succeeded;
};
struct WriteFailedEvent {  // a WriteAction with a `trouble` failed
  std::string trouble;
  Error error;
};
struct GroupTimerFiredEvent {
  GroupTimer timer;
};
using GroupEvent =
    std::variant<StartCall, ProposeCall, PublishStopCall, PublishDoneCall, ReleaseRankCall, LeaveCall,
                 LeaseGrantedEvent, LeaseGrantFailedEvent, LeaseLostEvent, SnapshotEvent, KeysChangedEvent,
                 ConnectionEvent, ClaimAnsweredEvent, JoinAnsweredEvent, DoneAnsweredEvent, StopAnsweredEvent,
                 ShrinkAnsweredEvent, FailuresAnsweredEvent, WriteFailedEvent, GroupTimerFiredEvent>;

// ---- actions: requests (each answered by the event its comment names) ----
struct GrantLeaseAction {  // LeaseGrantedEvent or LeaseGrantFailedEvent
  std::int64_t ttl_s = 0;
};
struct KeepLeaseAction {  // keep `id` alive from now on; LeaseLostEvent when it cannot
  std::int64_t id = 0;
  std::int64_t ttl_s = 0;
};
struct DropLeaseAction {};  // stop keeping the lease (it lapsed)
// The watch on the job's prefix: SnapshotEvent, KeysChangedEvent, ConnectionEvent.
struct WatchGroupAction {
  std::string prefix;  // <prefix>/<job>/
};
struct ClaimAction {  // ClaimAnsweredEvent
  int rank = -1;
  etcd::TxnRequest txn;
};
struct PutJoinAction {  // JoinAnsweredEvent
  std::uint64_t epoch = 0;
  std::uint64_t previous = 0;
  etcd::PutRequest put;
};
struct PutDoneAction {  // DoneAnsweredEvent
  std::uint64_t epoch = 0;
  etcd::PutRequest put;
};
struct PublishStopTxnAction {  // StopAnsweredEvent
  std::uint64_t epoch = 0;
  std::string why;
  etcd::TxnRequest txn;
};
struct ShrinkAction {  // ShrinkAnsweredEvent
  std::uint64_t epoch = 0;
  std::vector<int> ranks;
  std::vector<int> missing;
  etcd::TxnRequest txn;
};
struct RaiseFailuresAction {  // FailuresAnsweredEvent
  int count = 0;
  etcd::TxnRequest txn;
};
// A write whose answer decides nothing: WriteFailedEvent when it fails and `trouble` says
// what to tell people (empty: nothing).
struct WriteAction {
  std::variant<etcd::PutRequest, etcd::DeleteRangeRequest, etcd::TxnRequest> request;
  std::string trouble;
};
// Leave: stop the watch and the lease's keeper; then `done` (this node's trainer finished)
// if any, then revoke `lease` (0: none). Within request timeouts, on the io_context.
struct CloseAction {
  std::optional<etcd::PutRequest> done;
  std::int64_t lease = 0;
};
// ---- actions: timers, the local Fsm, the log ----
struct ArmGroupTimerAction {
  GroupTimer timer;
  Duration after{0};
};
struct CancelGroupTimerAction {
  GroupTimer timer;
};
struct TellAgreedAction {  // Propose's answer
  supervisor::GroupAgreedEvent agreed;
};
struct TellPeerStopAction {  // Handlers::on_peer_stop
  supervisor::StopRequestedEvent stop;
};
struct TellSpareAction {  // Handlers::on_spare
  bool waiting = true;
};
struct TellGrowAction {  // Handlers::on_grow: a node joined the running, shrunken group
  std::string detail;
};
struct TellCutOffAction {};         // Handlers::on_cut_off
struct TellFinishedAction {};       // PublishDone's answer: every rank's trainer succeeded
struct TellSpareFinishedAction {};  // Handlers::on_finished: the job is done while this node waited
using GroupAction =
    std::variant<GrantLeaseAction, KeepLeaseAction, DropLeaseAction, WatchGroupAction, ClaimAction, PutJoinAction,
                 PutDoneAction, PublishStopTxnAction, ShrinkAction, RaiseFailuresAction, WriteAction, CloseAction,
                 ArmGroupTimerAction, CancelGroupTimerAction, TellAgreedAction, TellPeerStopAction, TellSpareAction,
                 TellGrowAction, TellCutOffAction, TellFinishedAction, TellSpareFinishedAction, supervisor::LogAction>;

// The times an event is handled at: the steady one for retries and the trouble throttle,
// the wall one for the deadlines written to and read from etcd.
struct GroupNow {
  SteadyTime steady{};
  WallTime wall{};
};

inline constexpr Duration kGroupRetry = std::chrono::seconds(1);
inline constexpr Duration kTroubleEvery = std::chrono::seconds(30);  // the same trouble is said again after this

class GroupFsm {
 public:
  // `coordination` outlives the GroupFsm; `me` is what this node's member key says.
  GroupFsm(const config::CoordinationSection& coordination, std::string job_name, MemberRecord me);

  std::vector<GroupAction> Handle(const GroupEvent& event, GroupNow now);

  Seat seat() const { return seat_; }
  Course course() const { return course_; }
  int rank() const { return rank_; }
  const GroupView& view() const { return view_; }
  // This node's trainer runs in the group's newest epoch, under the lease that epoch was agreed
  // with: a node cut off and back holds a new lease while its trainer is still of the epoch the
  // others may have left.
  bool InAgreedEpoch() const {
    return InEpoch() && running_epoch_ != 0 && lease_ != 0 && lease_ == epoch_lease_ && view_.epoch <= running_epoch_;
  }

 private:
  // One event's handling: the actions go to `out_`, `now_` is its time.
  void OnStart();
  void OnPropose(const supervisor::ProposeResumeAction& proposal);
  void OnPublishStop(const supervisor::PublishStopAction& stop);
  void OnPublishDone();
  void OnReleaseRank();
  void OnLeave(bool finished);
  void OnLeaseGranted(const LeaseGrantedEvent& e);
  void OnLeaseLost(const Error& e);
  void OnSnapshot(const SnapshotEvent& e);
  void OnKeysChanged(const KeysChangedEvent& e);
  void OnConnection(const ConnectionEvent& e);
  void OnClaimAnswered(const ClaimAnsweredEvent& e);
  void OnJoinAnswered(const JoinAnsweredEvent& e);
  void OnDoneAnswered(const DoneAnsweredEvent& e);
  void OnStopAnswered(const StopAnsweredEvent& e);
  void OnShrinkAnswered(const ShrinkAnsweredEvent& e);
  void OnFailuresAnswered(const FailuresAnsweredEvent& e);
  void OnTimer(GroupTimer timer);

  // Membership.
  void Register();
  void ClaimRank();
  // No rank is free and coordination.spares allows spares: wait as one (a key under the
  // lease for `spotvisor status`), told to the Fsm once per proposal.
  void BecomeSpare();
  // The claim of rank `rank` succeeded: a spare's old proposal is dropped (the Fsm selects again).
  void OnClaimed(int rank);
  // Back from a lapsed lease, this node's rank is held by `holder`: its trainer of that rank
  // stops at once, and the next claim takes a free rank or waits as a spare.
  void OnRankTaken(int rank, const MemberRecord& holder);
  // One key folded into the view, and what it means to this node.
  void Apply(const etcd::KeyValue& kv, bool deleted);
  void OnMemberGone(int rank);
  // A spare (or a node held for growth): every rank of the newest epoch is done, so the job
  // is, and the spare too.
  void CheckSpareFinished();

  // The epochs. This node's good steps under the next epoch: one past the newest the group
  // agreed on or this node ran, or the epoch others already wait in.
  void PublishJoin();
  // The barrier: every rank in this node's epoch, then the same decision on every node.
  void Evaluate();
  void Agree(const std::vector<int>& ranks, const std::map<int, JoinRecord>& joined);
  // `epoch` key: the newest agreed epoch, moved forward only (a txn on its old value).
  void AdvanceEpochKey(std::uint64_t epoch);
  // `failures` key: raised to `count` (never lowered), by a txn on the value this node saw.
  void RaiseFailures(int count);
  // Every rank wrote done/EPOCH for the running epoch: the waiting PublishDone is answered.
  void CheckFinished();
  // Once per running epoch: the trainer stops through the usual path; `rank` caused it.
  void PeerStop(int rank, const std::string& cause, std::int64_t deadline_unix_ms);
  // The group agreed an epoch after the one this node's trainer runs (or finished) in: it
  // started without this node, which was cut off meanwhile (and whose trainer, still
  // computing, was not stopped by its own judgement of the cut-off). Nobody stops an epoch a
  // peer simply left, so this node stops its trainer itself, once; it then selects again and
  // waits to grow the group. A stop of the epoch under way already is left to finish.
  void CheckLeftBehind();
  // The one way the trainer is told to stop from here (a peer's stop, a rank taken, left
  // behind): once per running epoch, through the Fsm's usual stop.
  void StopTrainerOnce(const std::string& why, std::optional<std::chrono::milliseconds> grace_cap);

  // The group's size (coordination.min_nodes, shrink_after). Waiting in join_epoch_ with
  // `joined` but not the whole group: once no rank has joined for shrink_after, Shrink.
  void WatchForShrink(const std::map<int, JoinRecord>& joined);
  // At least min_nodes have joined and nobody else came: join_epoch_ starts with them (the
  // shrink record, written once by whichever node is first).
  void Shrink();
  // This node cannot start `epoch`: its shrink record leaves this rank out, or holds a rank
  // that is gone. The node joins a later one.
  bool Skips(std::uint64_t epoch) const;
  // The node of rank `rank`, outside the running (shrunken) epoch, waits to join it (its
  // member key said again by HoldForGrowth, after it selected): the local Fsm stops the
  // trainer at a checkpoint (GroupGrowingEvent), and the group starts again, larger.
  void GrowFor(int rank);
  // The newest epoch shrank without this node's rank and still runs: this node's checkpoints
  // are older than the one the group is about to save, so it waits (as a spare does) until
  // the group has stopped, then selects again.
  bool AwaitsGrowth() const;
  void HoldForGrowth();
  // A held node sees the group regroup (a later join, or the epoch's stop): select again.
  void ReleaseForGrowth(const ParsedKey& key, bool deleted);
  // `rank` trains in the running epoch.
  bool Runs(int rank) const;
  bool InEpoch() const {
    return course_ == Course::kRunning || course_ == Course::kFinishing || course_ == Course::kFinished;
  }

  // Output.
  void Do(GroupAction action) { out_.push_back(std::move(action)); }
  void Say(log::LogLevel level, std::string text) { Do(supervisor::LogAction{level, std::move(text)}); }
  void Arm(GroupTimer timer, Duration after);
  void Cancel(GroupTimer timer);
  // Said once, then again only after kTroubleEvery: etcd away must not flood the log.
  void Trouble(const std::string& what, const Error& e);

  const config::CoordinationSection& c_;  // not owned
  const std::string base_;                // <prefix>/<job>/
  const MemberRecord me_;
  Seat seat_ = Seat::kIdle;
  Course course_ = Course::kNone;
  std::vector<GroupAction> out_;
  GroupNow now_;

  std::int64_t lease_ = 0;                                  // 0: none yet (or lost)
  bool watching_ = false;                                   // WatchGroupAction issued
  bool synced_ = false;                                     // the watch's first snapshot arrived
  bool claiming_ = false;                                   // a claim's txn is in flight
  int rank_ = -1;                                           // this node's rank once claimed (kept across a lost lease)
  GroupView view_;                                          // what etcd holds under base_, kept by the watch
  std::uint64_t last_epoch_ = 0;                            // the newest epoch this node ran
  std::optional<supervisor::ProposeResumeAction> pending_;  // kProposed, kGrowthHeld: the proposal
  std::uint64_t join_epoch_ = 0;                            // where pending_ is published (0: not yet)
  std::uint64_t running_epoch_ = 0;                         // InEpoch(): the agreed epoch
  std::int64_t epoch_lease_ = 0;                            // lease_ when running_epoch_ was agreed
  std::vector<int> running_ranks_;                          // the ranks that started running_epoch_
  std::size_t shrink_seen_ = 0;                             // ranks joined in join_epoch_ when kShrink was armed
  bool stop_delivered_ = false;                             // a peer stop for running_epoch_ went out
  bool grow_told_ = false;                                  // a growth of running_epoch_ was told
  bool spare_finished_told_ = false;                        // TellSpareFinishedAction went out (once)
  std::map<GroupTimer, bool> armed_;                        // which timers are armed
  std::map<std::string, SteadyTime> trouble_;               // last said, per trouble
};

const char* SeatName(Seat seat);
const char* CourseName(Course course);
const char* GroupTimerName(GroupTimer timer);

}  // namespace spotvisor::coordination

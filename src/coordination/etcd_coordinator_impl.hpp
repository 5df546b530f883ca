// Private to src/coordination/: the etcd coordinator's state and its parts, in three files a
// reader finds by what they do: membership.cpp (the lease, the rank, the watch and what it
// reports, etcd trouble), etcd_coordinator.cpp (the epochs: the start barrier, the
// agreement, the stops, the factory) and group_size.cpp (shrinking when a rank stays lost,
// growing back when a node joins). Every retry, the trouble throttle and the wall times
// it writes come from the Clock it is made with (the host's). io_context thread only.
#pragma once

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "spotvisor/config/job_config.hpp"
#include "spotvisor/coordination/records.hpp"
#include "spotvisor/etcd/client.hpp"
#include "spotvisor/etcd/lease_keeper.hpp"
#include "spotvisor/etcd/watch.hpp"
#include "spotvisor/log/log.hpp"
#include "spotvisor/supervisor/coordinator.hpp"
#include "spotvisor/util/clock.hpp"
#include "spotvisor/util/host_name.hpp"

namespace spotvisor::coordination::detail {

using log::Log;
using log::LogLevel;
using log::Quote;
using supervisor::Coordinator;
using supervisor::GroupAgreedEvent;
using supervisor::GroupSpareEvent;
using supervisor::ProposeResumeAction;
using supervisor::PublishStopAction;
using supervisor::StopReason;
using supervisor::StopRequestedEvent;

constexpr auto kRetry = std::chrono::seconds(1);
constexpr auto kTroubleEvery = std::chrono::seconds(30);  // the same trouble is said again after this

inline std::string Join(const std::vector<std::string>& parts) {
  std::string out;
  for (const auto& p : parts) out += (out.empty() ? "" : ",") + p;
  return out;
}

class EtcdCoordinator final : public Coordinator {
 public:
  // `clock` (the client's too) outlives the coordinator.
  EtcdCoordinator(boost::asio::io_context& io, Clock& clock, const config::JobConfig& job,
                  std::unique_ptr<etcd::Client> client)
      : c_(job.coordination),
        base_(GroupPrefix(c_.prefix, job.job.name)),
        clock_(clock),
        client_(std::move(client)),
        retry_(clock.MakeTimer(io)),
        done_retry_(clock.MakeTimer(io)),
        shrink_timer_(clock.MakeTimer(io)),
        me_{c_.advertise, util::ShortHostName(), static_cast<std::int64_t>(getpid()), UnixMillis(clock.WallNow())} {}

  // coordinator.hpp's; Start and Leave in membership.cpp, Propose and PublishStop in
  // etcd_coordinator.cpp.
  void Start(Handlers handlers) override;
  void Propose(const ProposeResumeAction& proposal, AgreedHandler on_agreed) override;
  void PublishStop(const PublishStopAction& stop) override;
  void PublishDone(FinishedHandler on_finished) override;
  void Leave(bool finished) override;
  void ReleaseRank() override;

 private:
  // membership.cpp: a lease, then the view of the group (its snapshot claims the rank).
  void Register();
  void OnLeaseLost(const Error& e);
  void ClaimRank();
  // No rank is free and coordination.spares allows spares: wait as one (a key under the
  // lease for `spotvisor status`), told to the Fsm once per proposal.
  void BecomeSpare();
  // The claim of rank `rank` succeeded: a spare's old proposal is dropped (the Fsm selects again).
  void OnClaimed(int rank);
  // Back from a lapsed lease, this node's rank is held by `holder`: its trainer of that rank
  // stops at once, and the next claim takes a free rank or waits as a spare.
  void OnRankTaken(int rank, const MemberRecord& holder);
  // A spare: every rank of the newest epoch is done, so the job is, and the spare too.
  void CheckSpareFinished();
  void OnSnapshot(const etcd::RangeResponse& snapshot);
  void OnEvents(const std::vector<etcd::Event>& events);
  void OnConnection(bool connected, const std::string& why);
  void Apply(const etcd::KeyValue& kv, bool deleted);
  // Said once, then again only after kTroubleEvery: etcd away must not flood the log.
  void Trouble(const std::string& what, const Error& e);

  // etcd_coordinator.cpp. This node's good steps under the next epoch: one past the newest the group agreed on or
  // this node ran, or the epoch others already wait in.
  void PublishJoin();

  // The barrier: every rank in this node's epoch, then the same decision on every node.
  void Evaluate();

  // `epoch` key: the newest agreed epoch, moved forward only (a txn on its old value).
  void AdvanceEpochKey(std::uint64_t epoch);
  // `failures` key: raised to `count` (never lowered), by a txn on the value this node saw.
  void RaiseFailures(int count);

  // Every rank wrote done/EPOCH for the running epoch: the waiting PublishDone is answered.
  void CheckFinished();

  // Once per running epoch: the trainer stops through the usual path; `rank` caused it.
  void PeerStop(int rank, const std::string& cause, std::int64_t deadline_unix_ms);

  // group_size.cpp. Waiting in join_epoch_ with `joined` but not the whole group: once no
  // rank has joined for coordination.shrink_after, Shrink.
  void WatchForShrink(const std::map<int, JoinRecord>& joined);
  // At least min_nodes have joined and nobody else came: join_epoch_ starts with them (the
  // shrink record, written once by whichever node is first).
  void Shrink();
  // This node cannot start `epoch`: its shrink record leaves this rank out, or holds a rank
  // that is gone. The node joins a later one.
  bool Skips(std::uint64_t epoch) const;
  // The node of rank `rank`, outside the running (shrunken) epoch, waits to join it (its
  // member key said again by HoldForGrowth, after it selected; its claim alone is not
  // enough, or a selection still under way could end before the group's save and propose
  // older steps): the group stops at a checkpoint and starts again, larger.
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

  const config::CoordinationSection& c_;  // not owned
  const std::string base_;                // <prefix>/<job>/
  Clock& clock_;                          // retries, the trouble throttle, wall times written
  std::unique_ptr<etcd::Client> client_;
  std::unique_ptr<Timer> retry_;                // the next try after trouble
  std::unique_ptr<Timer> done_retry_;           // the next try of PublishDone's write
  std::unique_ptr<Timer> shrink_timer_;         // coordination.shrink_after since the last join
  MemberRecord me_;                             // what this node's member key says
  std::unique_ptr<etcd::LeaseKeeper> keeper_;   // keeps lease_ alive
  std::unique_ptr<etcd::SnapshotWatch> watch_;  // the view below
  std::int64_t lease_ = 0;                      // 0: none yet (or lost)
  int rank_ = -1;                               // this node's rank once claimed (kept across a lost lease)
  bool claimed_ = false;                        // members/rank_ is ours under lease_
  bool claiming_ = false;                       // a claim's txn is in flight
  bool spare_ = false;                          // waiting as a spare (spares/<lease_> is ours)
  bool growing_ = false;                        // HoldForGrowth: waiting for the shrunken group to stop
  bool released_ = false;                       // ReleaseRank: no claim until the next Propose
  SpareHandler on_spare_;
  CutOffHandler on_cut_off_;
  FinishedHandler on_spare_finished_;           // Handlers::on_finished: said once
  bool synced_ = false;                         // the first snapshot arrived
  GroupView view_;                              // what etcd holds under base_, kept by the watch
  std::uint64_t last_epoch_ = 0;                // the newest epoch this node ran
  std::optional<ProposeResumeAction> pending_;  // waiting for the group
  AgreedHandler on_agreed_;                     // for pending_
  std::uint64_t join_epoch_ = 0;                // where pending_ is published (0: not yet)
  std::uint64_t running_epoch_ = 0;             // agreed and started (0: none)
  std::vector<int> running_ranks_;              // the ranks that started running_epoch_
  std::size_t shrink_seen_ = 0;                 // ranks joined in join_epoch_ when shrink_timer_ was set
  bool stop_delivered_ = false;                 // a peer stop for running_epoch_ went out
  PeerStopHandler on_peer_stop_;
  FinishedHandler on_finished_;                // PublishDone's, until every rank is done (or a new Propose)
  bool left_ = false;                          // Leave() was called
  std::map<std::string, SteadyTime> trouble_;  // last said, per trouble
};

}  // namespace spotvisor::coordination::detail

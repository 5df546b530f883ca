// The multi-node coordinator's epochs (see etcd_coordinator.hpp, records.hpp): this node's
// join of the next epoch, the barrier and the one decision every node makes alike, the one
// stop per epoch and a peer's, the factory, and the one-shot read for `spotvisor status`.
// Its membership (lease, rank, watch) is membership.cpp; its state etcd_coordinator_impl.hpp.
#include "spotvisor/coordination/etcd_coordinator.hpp"

#include <boost/asio/io_context.hpp>

#include "etcd_coordinator_impl.hpp"

namespace spotvisor::coordination {
namespace detail {

void EtcdCoordinator::Propose(const ProposeResumeAction& proposal, AgreedHandler on_agreed) {
  on_finished_ = nullptr;  // the group did not finish: a peer stopped it
  done_retry_->Cancel();
  pending_ = proposal;
  on_agreed_ = std::move(on_agreed);
  running_epoch_ = 0;
  stop_delivered_ = false;
  Log(LogLevel::kInfo, "event=group_waiting nodes=" + std::to_string(c_.nodes) +
                           " good_steps=" + std::to_string(proposal.good.size()) +
                           " detail=\"waiting until every rank has joined the next epoch\"");
  if (released_) {  // drained, then the notice cleared: a rank again, or a spare's place
    released_ = false;
    if (synced_) ClaimRank();
    return;
  }
  if (spare_) {
    if (on_spare_) on_spare_(GroupSpareEvent{true});
    return;
  }
  if (claimed_ && synced_) PublishJoin();
}

void EtcdCoordinator::PublishStop(const PublishStopAction& stop) {
  if (left_) return;
  if (stop.failures) RaiseFailures(*stop.failures);
  if (running_epoch_ == 0) {
    // Not started yet: take back this node's join, so that the group does not start without it.
    if (pending_ && join_epoch_ != 0)
      client_->DeleteRange({JoinKey(base_, join_epoch_, rank_), "", false}, [](auto) {});
    pending_.reset();
    join_epoch_ = 0;
    return;
  }
  StopRecord record{rank_, stop.why, stop.grace_cap ? UnixMillis(clock_.WallNow()) + stop.grace_cap->count() : 0};
  etcd::TxnRequest txn;
  const std::string key = StopKey(base_, running_epoch_);
  txn.compare.push_back(etcd::Compare::Absent(key));
  txn.success.emplace_back(etcd::PutRequest{key, Encode(record), 0, false});
  const auto epoch = running_epoch_;
  client_->Txn(std::move(txn), [this, epoch, why = stop.why](Result<etcd::TxnResponse> r) {
    if (!r) {
      Trouble("could not tell the group of this node's stop", r.error());
      return;
    }
    Log(LogLevel::kInfo, "event=group_stop_published epoch=" + std::to_string(epoch) + " why=" + Quote(why) +
                             " first=" + (r->succeeded ? "true" : "false"));
  });
}

void EtcdCoordinator::PublishDone(FinishedHandler on_finished) {
  if (left_ || running_epoch_ == 0) return;
  on_finished_ = std::move(on_finished);
  const auto epoch = running_epoch_;
  client_->Put({DoneKey(base_, epoch, rank_), "{}", 0, false}, [this, epoch](Result<etcd::PutResponse> r) {
    if (left_ || !on_finished_ || epoch != running_epoch_) return;
    if (!r) {
      Trouble("cannot tell the group that this node's trainer finished", r.error());
      done_retry_->After(kRetry, [this] {
        if (on_finished_) PublishDone(std::move(on_finished_));
      });
      return;
    }
    CheckFinished();  // the watch brings it too; whichever comes first answers
  });
}

void EtcdCoordinator::CheckFinished() {
  if (!on_finished_ || running_epoch_ == 0) return;
  const auto done = view_.done.find(running_epoch_);
  if (done == view_.done.end()) return;
  for (int r : running_ranks_) {
    if (done->second.count(r) == 0) return;
  }
  Log(LogLevel::kInfo, "event=group_finished epoch=" + std::to_string(running_epoch_) + " nodes=" +
                           std::to_string(running_ranks_.size()) + " detail=\"every node's trainer finished\"");
  auto on_finished = std::move(on_finished_);
  on_finished_ = nullptr;
  on_finished();
}

// This node's good steps under the next epoch: one past the newest the group agreed on or
// this node ran, or the epoch others already wait in.
void EtcdCoordinator::PublishJoin() {
  if (left_ || !pending_ || !claimed_) return;
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
  shrink_timer_->Cancel();
  shrink_seen_ = 0;
  JoinRecord record;
  for (const auto& p : pending_->good) record.steps.push_back(p.step);
  const auto previous = join_epoch_;
  join_epoch_ = epoch;
  client_->Put({JoinKey(base_, epoch, rank_), Encode(record), lease_, false},
               [this, epoch, previous](Result<etcd::PutResponse> r) {
                 if (left_) return;
                 if (!r) {
                   Trouble("cannot join epoch " + std::to_string(epoch), r.error());
                   if (join_epoch_ == epoch) join_epoch_ = previous;
                   retry_->After(kRetry, [this] { PublishJoin(); });
                   return;
                 }
                 if (previous != 0 && previous != epoch) {
                   client_->DeleteRange({JoinKey(base_, previous, rank_), "", false}, [](auto) {});
                 }
                 Evaluate();
               });
}

// The barrier: every rank in this node's epoch, then the same decision on every node.
void EtcdCoordinator::Evaluate() {
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
  shrink_timer_->Cancel();
  GroupAgreedEvent agreed;
  const auto step = AgreedStep(it->second, ranks);
  if (step) {
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
  running_ranks_ = ranks;
  last_epoch_ = join_epoch_;
  join_epoch_ = 0;
  pending_.reset();
  stop_delivered_ = false;
  Log(LogLevel::kInfo, "event=group_agreed epoch=" + std::to_string(running_epoch_) + " rank=" + std::to_string(rank_) +
                           " nodes=" + std::to_string(agreed.place.world) +
                           (agreed.place.world < c_.nodes
                                ? " of=" + std::to_string(c_.nodes) + " place=" + std::to_string(agreed.place.rank)
                                : std::string()) +
                           " step=" + (agreed.point ? std::to_string(agreed.point->step) : std::string("none")) +
                           " master_addr=" + Quote(agreed.place.master_addr));
  AdvanceEpochKey(running_epoch_);
  auto on_agreed = std::move(on_agreed_);
  on_agreed_ = nullptr;
  on_agreed(std::move(agreed));
  // A peer may have stopped this epoch before this node heard of the agreement.
  if (auto s = view_.stops.find(running_epoch_); s != view_.stops.end() && s->second.rank != rank_) {
    PeerStop(s->second.rank, s->second.why, s->second.deadline_unix_ms);
  }
}

namespace {

// A txn that moves the decimal counter at `key` from `seen` (0: the key is absent) to `value`,
// and fails if another node moved it first.
etcd::TxnRequest MoveCounter(const std::string& key, std::uint64_t seen, std::uint64_t value) {
  etcd::TxnRequest txn;
  txn.compare.push_back(seen == 0 ? etcd::Compare::Absent(key)
                                  : etcd::Compare::Value(key, etcd::Compare::Result::kEqual, std::to_string(seen)));
  txn.success.emplace_back(etcd::PutRequest{key, std::to_string(value), 0, false});
  return txn;
}

}  // namespace

// `epoch` key: the newest agreed epoch, moved forward only (a txn on its old value).
void EtcdCoordinator::AdvanceEpochKey(std::uint64_t epoch) {
  if (epoch <= view_.epoch) return;
  // Another node may have moved it first: nothing to do then.
  client_->Txn(MoveCounter(EpochKey(base_), view_.epoch, epoch), [](auto) {});
}

void EtcdCoordinator::RaiseFailures(int count) {
  if (count <= view_.failures) return;
  client_->Txn(
      MoveCounter(FailuresKey(base_), static_cast<std::uint64_t>(view_.failures), static_cast<std::uint64_t>(count)),
      [this, count](Result<etcd::TxnResponse> r) {
        if (!r) {
          Trouble("could not count this node's failure for the job", r.error());
          return;
        }
        if (r->succeeded) {
          view_.failures = std::max(view_.failures, count);
          Log(LogLevel::kInfo, "event=group_failures count=" + std::to_string(count));
        }
      });
}

// Once per running epoch: the trainer stops through the usual path.
void EtcdCoordinator::PeerStop(int rank, const std::string& cause, std::int64_t deadline_unix_ms) {
  if (running_epoch_ == 0 || stop_delivered_ || !on_peer_stop_) return;
  stop_delivered_ = true;
  const std::string why = "node " + std::to_string(rank) + ": " + cause;
  std::optional<std::chrono::milliseconds> cap;
  if (deadline_unix_ms > 0)
    cap = std::chrono::milliseconds(std::max<std::int64_t>(0, deadline_unix_ms - UnixMillis(clock_.WallNow())));
  Log(LogLevel::kWarning, "event=peer_stop epoch=" + std::to_string(running_epoch_) + " rank=" + std::to_string(rank) +
                              " why=" + Quote(why) + (cap ? " grace_cap=" + FormatDuration(*cap) : std::string()));
  on_peer_stop_(StopRequestedEvent{StopReason::kPeer, cap, why});
}

}  // namespace detail

using detail::EtcdCoordinator;
using detail::Join;

Result<std::unique_ptr<supervisor::Coordinator>> MakeEtcdCoordinator(boost::asio::io_context& io, Clock& clock,
                                                                     const config::JobConfig& job) {
  etcd::ClientOptions options;
  options.endpoints = job.coordination.etcd;
  if (job.coordination.credentials) options.credentials_file = job.coordination.credentials->string();
  options.tls = {job.coordination.tls.ca.value_or(""), job.coordination.tls.cert.value_or(""),
                 job.coordination.tls.key.value_or("")};
  auto client = etcd::Client::Create(io, clock, options);
  if (!client) return Error{"coordination.etcd: " + client.error().message};
  return std::unique_ptr<supervisor::Coordinator>(
      std::make_unique<EtcdCoordinator>(io, clock, job, std::move(*client)));
}

Result<GroupView> ReadGroup(const config::JobConfig& job) {
  boost::asio::io_context io;
  etcd::ClientOptions options;
  options.endpoints = job.coordination.etcd;
  if (job.coordination.credentials) options.credentials_file = job.coordination.credentials->string();
  options.tls = {job.coordination.tls.ca.value_or(""), job.coordination.tls.cert.value_or(""),
                 job.coordination.tls.key.value_or("")};
  // Real time: a one-shot command waiting on a real socket, with nothing to test in between.
  Clock& clock = SystemClock();
  auto client = etcd::Client::Create(io, clock, options);
  if (!client) return Error{"coordination.etcd: " + client.error().message};
  const std::string base = GroupPrefix(job.coordination.prefix, job.job.name);
  std::optional<Result<etcd::RangeResponse>> answer;
  (*client)->Range({base, etcd::PrefixEnd(base)}, [&answer](Result<etcd::RangeResponse> r) { answer = std::move(r); });
  const auto until = clock.Now() + std::chrono::seconds(10);
  while (!answer && clock.Now() < until) io.run_for(std::chrono::milliseconds(50));
  if (!answer || !*answer) {
    return Error{"cannot read the group from etcd at " + Join(job.coordination.etcd) + ": " +
                 (answer ? answer->error().message : std::string("no answer"))};
  }
  std::vector<KeyValueText> pairs;
  for (const auto& kv : (*answer)->kvs) pairs.push_back({kv.key, kv.value});
  return ReadView(base, pairs);
}

}  // namespace spotvisor::coordination

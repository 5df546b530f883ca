// The coordinator's group size (coordination.min_nodes, shrink_after): a group that lost a
// rank and got neither a spare nor a replacement within shrink_after starts the next epoch
// with the nodes it has (at least min_nodes), and grows back when a node joins: the running
// trainers stop at a checkpoint and the group starts again, larger. The decision is one
// record per epoch (shrink/EPOCH, written once by txn); every node follows the record, not
// its own timer. See etcd_coordinator_impl.hpp.
#include "etcd_coordinator_impl.hpp"

namespace spotvisor::coordination::detail {

namespace {

std::string Ranks(const std::vector<int>& ranks) {
  std::string out;
  for (int r : ranks) out += (out.empty() ? "" : ",") + std::to_string(r);
  return out;
}

}  // namespace

bool EtcdCoordinator::Runs(int rank) const {
  return running_epoch_ != 0 && std::find(running_ranks_.begin(), running_ranks_.end(), rank) != running_ranks_.end();
}

void EtcdCoordinator::WatchForShrink(const std::map<int, JoinRecord>& joined) {
  if (!c_.shrinks() || view_.shrinks.count(join_epoch_) != 0) return;
  if (joined.size() == shrink_seen_ && shrink_timer_->Pending()) return;
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
  Log(LogLevel::kInfo, "event=group_shrink_pending rank=" + std::to_string(rank_) +
                           " epoch=" + std::to_string(join_epoch_) + " joined=" + Ranks(ranks) +
                           " shrink_in=" + FormatDuration(wait) +
                           " detail=\"a rank is missing: without a node for it by then, the group starts with fewer\"");
  shrink_timer_->After(wait, [this] { Shrink(); });
}

void EtcdCoordinator::Shrink() {
  if (left_ || !pending_ || join_epoch_ == 0 || !claimed_ || view_.shrinks.count(join_epoch_) != 0) return;
  const auto it = view_.joins.find(join_epoch_);
  if (it == view_.joins.end() || it->second.count(rank_) == 0) return;
  ShrinkRecord record;
  std::vector<int> missing;
  for (int r = 0; r < c_.nodes; ++r) (it->second.count(r) != 0 ? record.ranks : missing).push_back(r);
  if (missing.empty()) return;
  if (record.ranks.size() < static_cast<std::size_t>(c_.min_nodes)) {
    Log(LogLevel::kInfo, "event=group_too_small epoch=" + std::to_string(join_epoch_) + " joined=" +
                             std::to_string(record.ranks.size()) + " min_nodes=" + std::to_string(c_.min_nodes) +
                             " detail=\"fewer than coordination.min_nodes: waiting for a node to join\"");
    return;
  }
  // Written once, and only while no missing rank has joined: a replacement that just came
  // makes the txn fail, and the group starts whole.
  etcd::TxnRequest txn;
  const std::string key = ShrinkKey(base_, join_epoch_);
  txn.compare.push_back(etcd::Compare::Absent(key));
  for (int r : missing) txn.compare.push_back(etcd::Compare::Absent(JoinKey(base_, join_epoch_, r)));
  txn.success.emplace_back(etcd::PutRequest{key, Encode(record), 0, false});
  const auto epoch = join_epoch_;
  client_->Txn(std::move(txn), [this, epoch, record, missing](Result<etcd::TxnResponse> r) {
    if (left_) return;
    if (!r) {
      Trouble("cannot shrink the group for epoch " + std::to_string(epoch), r.error());
      if (epoch == join_epoch_) shrink_timer_->After(kRetry, [this] { Shrink(); });
      return;
    }
    if (!r->succeeded) return;  // another node wrote it first, or a replacement joined: the watch brings either
    Log(LogLevel::kWarning, "event=group_shrinking epoch=" + std::to_string(epoch) +
                                " nodes=" + std::to_string(record.ranks.size()) + " of=" + std::to_string(c_.nodes) +
                                " ranks=" + Ranks(record.ranks) + " missing=" + Ranks(missing) +
                                " detail=\"no node came for the missing rank within coordination.shrink_after (" +
                                FormatDuration(c_.shrink_after) + "): training on with fewer nodes\"");
  });
}

bool EtcdCoordinator::Skips(std::uint64_t epoch) const {
  const auto it = view_.shrinks.find(epoch);
  if (it == view_.shrinks.end() || epoch <= view_.epoch) return false;
  const auto& ranks = it->second;
  if (std::find(ranks.begin(), ranks.end(), rank_) == ranks.end()) return true;
  return std::any_of(ranks.begin(), ranks.end(), [this](int r) { return view_.members.count(r) == 0; });
}

void EtcdCoordinator::GrowFor(int rank) {
  if (running_epoch_ == 0 || rank == rank_ || Runs(rank)) return;
  if (running_ranks_.size() >= static_cast<std::size_t>(c_.nodes)) return;
  Log(LogLevel::kInfo, "event=group_growing epoch=" + std::to_string(running_epoch_) +
                           " nodes=" + std::to_string(running_ranks_.size()) + " of=" + std::to_string(c_.nodes) +
                           " joined_rank=" + std::to_string(rank) +
                           " detail=\"a node joined the shrunken group: checkpoint, then start again with it\"");
  PeerStop(rank, "joined the shrunken group: it grows back at this checkpoint", 0);
}

bool EtcdCoordinator::AwaitsGrowth() const {
  const auto shrunk = view_.shrinks.find(view_.epoch);
  if (shrunk == view_.shrinks.end() || last_epoch_ >= view_.epoch) return false;
  const auto& ranks = shrunk->second;
  if (std::find(ranks.begin(), ranks.end(), rank_) != ranks.end()) return false;
  if (view_.stops.count(view_.epoch) != 0) return false;  // stopped already: join as usual
  const auto later = view_.joins.upper_bound(view_.epoch);
  return later == view_.joins.end();  // nobody regroups yet
}

void EtcdCoordinator::HoldForGrowth() {
  if (growing_) return;
  growing_ = true;
  const auto& ranks = view_.shrinks.at(view_.epoch);
  Log(LogLevel::kInfo, "event=group_grow_waiting rank=" + std::to_string(rank_) +
                           " epoch=" + std::to_string(view_.epoch) + " nodes=" + std::to_string(ranks.size()) +
                           " of=" + std::to_string(c_.nodes) +
                           " detail=\"the group trains shrunken: it stops at a checkpoint, then this node selects "
                           "again and joins\"");
  // Said again under the lease: the running nodes hear of this node even when its rank was
  // held all along (a drained node whose notice cleared).
  client_->Put({MemberKey(base_, rank_), Encode(me_), lease_, false}, [this](Result<etcd::PutResponse> r) {
    if (!r) Trouble("cannot tell the shrunken group that this node is back", r.error());
  });
  if (on_spare_) on_spare_(GroupSpareEvent{true});
  CheckSpareFinished();
}

void EtcdCoordinator::ReleaseForGrowth(const ParsedKey& key, bool deleted) {
  if (!growing_ || deleted) return;
  const bool regroups = (key.kind == ParsedKey::Kind::kJoin && key.epoch > view_.epoch) ||
                        (key.kind == ParsedKey::Kind::kStop && key.epoch == view_.epoch);
  if (!regroups) return;
  growing_ = false;
  pending_.reset();
  on_agreed_ = nullptr;
  Log(LogLevel::kInfo, "event=group_grow_ready rank=" + std::to_string(rank_) +
                           " detail=\"the shrunken group stopped: selecting again, then joining it\"");
  if (on_spare_) on_spare_(GroupSpareEvent{false});
}

}  // namespace spotvisor::coordination::detail

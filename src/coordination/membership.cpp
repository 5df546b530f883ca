// The coordinator's membership: this node's lease and rank, the one watch on the job's
// prefix and what it reports, etcd trouble said without flooding. See etcd_coordinator_impl.hpp.
#include "etcd_coordinator_impl.hpp"

namespace spotvisor::coordination::detail {

void EtcdCoordinator::Start(PeerStopHandler on_peer_stop) {
  on_peer_stop_ = std::move(on_peer_stop);
  Log(LogLevel::kInfo, "event=group_connecting etcd=" + Quote(Join(c_.etcd)) + " prefix=" + Quote(base_) +
                           " nodes=" + std::to_string(c_.nodes) + " node_rank=" +
                           (c_.node_rank == config::kAutoRank ? std::string("auto") : std::to_string(c_.node_rank)));
  Register();
}

void EtcdCoordinator::Leave(bool finished) {
  if (left_) return;
  left_ = true;
  retry_->Cancel();
  done_retry_->Cancel();
  watch_.reset();
  keeper_.reset();
  if (lease_ == 0) return;
  Log(LogLevel::kInfo, "event=group_left rank=" + std::to_string(rank_) + " finished=" + (finished ? "true" : "false"));
  const auto revoke = [this] { client_->LeaseRevoke(lease_, [](auto) {}); };  // the io_context runs until answered
  if (!finished || running_epoch_ == 0 || !claimed_) {
    revoke();
    return;
  }
  // First the done, then the member key goes: the peers read them in that order.
  client_->Put({DoneKey(base_, running_epoch_, rank_), "{}", 0, false}, [revoke](auto) { revoke(); });
}

// A lease, then the view of the group (its snapshot claims the rank).
void EtcdCoordinator::Register() {
  if (left_) return;
  const auto ttl = std::chrono::duration_cast<std::chrono::seconds>(c_.lease_ttl).count();
  client_->LeaseGrant(ttl, [this](Result<etcd::LeaseGrantResponse> r) {
    if (left_) return;
    if (!r) {
      Trouble("cannot reach etcd at " + Join(c_.etcd), r.error());
      retry_->After(kRetry, [this] { Register(); });
      return;
    }
    lease_ = r->id;
    keeper_ = std::make_unique<etcd::LeaseKeeper>(*client_, r->id, r->ttl, [this](Error e) { OnLeaseLost(e); });
    keeper_->Start();
    if (watch_) {
      ClaimRank();
      return;
    }
    watch_ = std::make_unique<etcd::SnapshotWatch>(
        *client_, base_,
        etcd::SnapshotWatchHandlers{[this](const etcd::RangeResponse& s) { OnSnapshot(s); },
                                    [this](const std::vector<etcd::Event>& events) { OnEvents(events); },
                                    [this](bool connected, const std::string& why) { OnConnection(connected, why); }});
    watch_->Start();
  });
}

void EtcdCoordinator::OnLeaseLost(const Error& e) {
  Log(LogLevel::kError, "event=group_lease_lost rank=" + std::to_string(rank_) + " error=" + Quote(e.message) +
                            " detail=\"training goes on; taking the rank again under a new lease\"");
  lease_ = 0;
  keeper_.reset();
  claimed_ = false;
  retry_->After(std::chrono::milliseconds(0), [this] { Register(); });
}

void EtcdCoordinator::ClaimRank() {
  if (left_ || lease_ == 0 || claimed_) return;
  int want = rank_ >= 0 ? rank_ : c_.node_rank;
  if (want == config::kAutoRank) {
    auto free = LowestFreeRank(view_.members, c_.nodes);
    if (!free) {
      Trouble("all " + std::to_string(c_.nodes) + " ranks are held; waiting for one to be free",
              Error{"coordination.nodes = " + std::to_string(c_.nodes)});
      retry_->After(kRetry, [this] { ClaimRank(); });
      return;
    }
    want = *free;
  }
  const std::string key = MemberKey(base_, want);
  etcd::TxnRequest txn;
  // Free, or held by this very supervisor under a lease it lost (etcd was away).
  const auto held = view_.members.find(want);
  if (held != view_.members.end() && held->second.pid == me_.pid && held->second.since_unix_ms == me_.since_unix_ms) {
    txn.compare.push_back(etcd::Compare::Value(key, etcd::Compare::Result::kEqual, Encode(held->second)));
  } else {
    txn.compare.push_back(etcd::Compare::Absent(key));
  }
  txn.success.emplace_back(etcd::PutRequest{key, Encode(me_), lease_, false});
  client_->Txn(std::move(txn), [this, want](Result<etcd::TxnResponse> r) {
    if (left_ || claimed_) return;
    if (!r) {
      Trouble("cannot claim rank " + std::to_string(want), r.error());
      retry_->After(kRetry, [this] { ClaimRank(); });
      return;
    }
    if (!r->succeeded) {
      Trouble("rank " + std::to_string(want) + " is held by another node; waiting for it to be free",
              Error{"key " + MemberKey(base_, want)});
      retry_->After(kRetry, [this] { ClaimRank(); });
      return;
    }
    rank_ = want;
    claimed_ = true;
    trouble_.clear();
    Log(LogLevel::kInfo, "event=group_joined rank=" + std::to_string(rank_) + " nodes=" + std::to_string(c_.nodes) +
                             " advertise=" + Quote(me_.advertise) + " lease_ttl=" + FormatDuration(c_.lease_ttl));
    if (pending_) PublishJoin();
  });
}

void EtcdCoordinator::OnSnapshot(const etcd::RangeResponse& snapshot) {
  view_ = GroupView{};
  for (const auto& kv : snapshot.kvs) Apply(kv, false);
  synced_ = true;
  if (!claimed_) ClaimRank();
  Evaluate();
  CheckFinished();
}

void EtcdCoordinator::OnEvents(const std::vector<etcd::Event>& events) {
  for (const auto& e : events) Apply(e.kv, e.type == etcd::Event::Type::kDelete);
  Evaluate();
  CheckFinished();
}

void EtcdCoordinator::OnConnection(bool connected, const std::string& why) {
  if (connected) {
    if (!trouble_.empty()) Log(LogLevel::kInfo, "event=group_reconnected etcd=" + Quote(Join(c_.etcd)));
    trouble_.clear();
  } else {
    Trouble("lost the watch on the group", Error{why});
  }
}

void EtcdCoordinator::Apply(const etcd::KeyValue& kv, bool deleted) {
  const ParsedKey key = ParseKey(base_, kv.key);
  if (!Fold(view_, key, kv.value, deleted)) return;
  if (key.kind == ParsedKey::Kind::kMember && deleted) {
    if (key.rank == rank_) {
      // Our own key is gone though our lease is not known lost: claim it again.
      if (claimed_ && lease_ != 0) {
        claimed_ = false;
        ClaimRank();
      }
      return;
    }
    const auto done = view_.done.find(running_epoch_);
    if (done != view_.done.end() && done->second.count(key.rank) != 0) {
      Log(LogLevel::kInfo,
          "event=peer_finished rank=" + std::to_string(key.rank) + " epoch=" + std::to_string(running_epoch_));
    } else {
      PeerStop(key.rank, "left the group (its lease lapsed)", 0);
    }
  } else if (key.kind == ParsedKey::Kind::kStop && !deleted && key.epoch == running_epoch_) {
    const StopRecord& s = view_.stops.at(key.epoch);
    if (s.rank != rank_) PeerStop(s.rank, s.why, s.deadline_unix_ms);
  }
}

// Said once, then again only after kTroubleEvery: etcd away must not flood the log.
void EtcdCoordinator::Trouble(const std::string& what, const Error& e) {
  const auto now = clock_.Now();
  auto& last = trouble_[what];
  if (last != SteadyTime{} && now - last < kTroubleEvery) return;
  last = now;
  Log(LogLevel::kWarning, "event=group_trouble what=" + Quote(what) + " error=" + Quote(e.message) +
                              " detail=\"training goes on; spotvisor keeps trying\"");
}

}  // namespace spotvisor::coordination::detail

// The coordinator's membership: this node's lease and rank, the one watch on the job's
// prefix and what it reports, etcd trouble said without flooding. See etcd_coordinator_impl.hpp.
#include "etcd_coordinator_impl.hpp"

namespace spotvisor::coordination::detail {

void EtcdCoordinator::Start(Handlers handlers) {
  on_peer_stop_ = std::move(handlers.on_peer_stop);
  on_spare_ = std::move(handlers.on_spare);
  on_cut_off_ = std::move(handlers.on_cut_off);
  on_spare_finished_ = std::move(handlers.on_finished);
  Log(LogLevel::kInfo,
      "event=group_connecting etcd=" + Quote(Join(c_.etcd)) + " prefix=" + Quote(base_) +
          " nodes=" + std::to_string(c_.nodes) + " spares=" + std::to_string(c_.spares) +
          " node_rank=" + (c_.node_rank == config::kAutoRank ? std::string("auto") : std::to_string(c_.node_rank)));
  Register();
}

void EtcdCoordinator::Leave(bool finished) {
  if (left_) return;
  left_ = true;
  retry_->Cancel();
  done_retry_->Cancel();
  shrink_timer_->Cancel();
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
  const bool trainer = running_epoch_ != 0 && claimed_;
  Log(LogLevel::kError, "event=group_lease_lost rank=" + std::to_string(rank_) + " error=" + Quote(e.message) +
                            " detail=\"" +
                            (trainer ? "the rank can be taken now: the trainer goes on only if it progresses; " : "") +
                            "taking the rank again under a new lease\"");
  if (trainer && on_cut_off_) on_cut_off_();
  lease_ = 0;
  keeper_.reset();
  claimed_ = false;
  spare_ = false;  // its key went with the lease: said again under the new one
  retry_->After(std::chrono::milliseconds(0), [this] { Register(); });
}

void EtcdCoordinator::ClaimRank() {
  if (left_ || lease_ == 0 || claimed_ || claiming_ || released_) return;
  int want = rank_ >= 0 ? rank_ : c_.node_rank;
  if (want == config::kAutoRank) {
    // A rank whose trainer finished in the newest epoch is not free: its node left at the
    // job's end, and a newcomer (a spare) must not start the job again.
    auto held = view_.members;
    if (const auto finished = view_.done.find(view_.epoch); finished != view_.done.end()) {
      for (int rank : finished->second) held.emplace(rank, MemberRecord{});
    }
    auto free = LowestFreeRank(held, c_.nodes);
    if (!free) {
      if (c_.spares > 0) {
        BecomeSpare();
      } else {
        Trouble("all " + std::to_string(c_.nodes) + " ranks are held; waiting for one to be free",
                Error{"coordination.nodes = " + std::to_string(c_.nodes)});
      }
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
  claiming_ = true;
  client_->Txn(std::move(txn), [this, want](Result<etcd::TxnResponse> r) {
    claiming_ = false;
    if (left_ || claimed_ || released_) return;
    if (!r) {
      Trouble("cannot claim rank " + std::to_string(want), r.error());
      retry_->After(kRetry, [this] { ClaimRank(); });
      return;
    }
    if (!r->succeeded) {
      const auto holder = view_.members.find(want);
      if (want == rank_ && (c_.node_rank == config::kAutoRank || running_epoch_ != 0) &&
          holder != view_.members.end() &&
          !(holder->second.pid == me_.pid && holder->second.since_unix_ms == me_.since_unix_ms)) {
        OnRankTaken(want, holder->second);
        return;
      }
      Trouble("rank " + std::to_string(want) + " is held by another node; waiting for it to be free",
              Error{"key " + MemberKey(base_, want)});
      retry_->After(kRetry, [this] { ClaimRank(); });
      return;
    }
    OnClaimed(want);
  });
}

void EtcdCoordinator::OnClaimed(int rank) {
  rank_ = rank;
  claimed_ = true;
  trouble_.clear();
  const bool was_spare = spare_;
  if (was_spare) {
    spare_ = false;
    client_->DeleteRange({SpareKey(base_, lease_), "", false}, [](auto) {});
  }
  Log(LogLevel::kInfo, "event=group_joined rank=" + std::to_string(rank_) + " nodes=" + std::to_string(c_.nodes) +
                           " advertise=" + Quote(me_.advertise) + " lease_ttl=" + FormatDuration(c_.lease_ttl) +
                           (was_spare ? " from=spare" : ""));
  if (was_spare && pending_) {
    // Proposed while waiting: the checkpoints may have changed since (the lost rank's last
    // save). The Fsm selects again and proposes anew.
    pending_.reset();
    on_agreed_ = nullptr;
    if (on_spare_) on_spare_(GroupSpareEvent{false});
    return;
  }
  if (pending_) PublishJoin();
}

void EtcdCoordinator::OnRankTaken(int rank, const MemberRecord& holder) {
  const bool running = running_epoch_ != 0;
  Log(LogLevel::kError, "event=group_rank_taken rank=" + std::to_string(rank) + " holder=" + Quote(holder.host) +
                            " holder_advertise=" + Quote(holder.advertise) + " detail=\"" +
                            (running ? "this node's trainer of that rank stops now; " : "") +
                            "the rank went to another node while this node was cut off\"");
  if (running && !stop_delivered_ && on_peer_stop_) {
    stop_delivered_ = true;
    on_peer_stop_(StopRequestedEvent{StopReason::kPeer, std::nullopt,
                                     "rank " + std::to_string(rank) + " was taken by " + holder.host + " (" +
                                         holder.advertise + ") while this node was cut off"});
  }
  running_epoch_ = 0;
  if (c_.node_rank == config::kAutoRank) rank_ = -1;  // a free rank, or a spare's wait
  retry_->After(kRetry, [this] { ClaimRank(); });
}

void EtcdCoordinator::BecomeSpare() {
  if (spare_) return;
  spare_ = true;
  client_->Put({SpareKey(base_, lease_), Encode(me_), lease_, false}, [this](Result<etcd::PutResponse> r) {
    if (!r) Trouble("cannot tell the group that this node waits as a spare", r.error());
  });
  Log(LogLevel::kInfo, "event=spare_waiting nodes=" + std::to_string(c_.nodes) +
                           " spares=" + std::to_string(view_.spares.size() + 1) + " of=" + std::to_string(c_.spares) +
                           " detail=\"every rank is held; taking the first one lost\"");
  if (view_.spares.size() + 1 > static_cast<std::size_t>(c_.spares)) {
    Log(LogLevel::kWarning, "event=spares_beyond_config spares=" + std::to_string(view_.spares.size() + 1) +
                                " coordination_spares=" + std::to_string(c_.spares) +
                                " detail=\"more nodes wait than coordination.spares says; this one waits too\"");
  }
  if (pending_ && on_spare_) on_spare_(GroupSpareEvent{true});
  CheckSpareFinished();
}

void EtcdCoordinator::ReleaseRank() {
  if (left_) return;
  released_ = true;
  retry_->Cancel();
  if (pending_ && join_epoch_ != 0 && claimed_)
    client_->DeleteRange({JoinKey(base_, join_epoch_, rank_), "", false}, [](auto) {});
  pending_.reset();
  on_agreed_ = nullptr;
  join_epoch_ = 0;
  running_epoch_ = 0;  // what happens to the group now is no longer this node's to stop
  growing_ = false;
  if (spare_) {
    spare_ = false;
    client_->DeleteRange({SpareKey(base_, lease_), "", false}, [](auto) {});
    Log(LogLevel::kInfo, "event=spare_left detail=\"drained: no longer waiting for a rank\"");
  }
  if (!claimed_) return;
  claimed_ = false;
  etcd::TxnRequest txn;
  const std::string key = MemberKey(base_, rank_);
  txn.compare.push_back(etcd::Compare::Value(key, etcd::Compare::Result::kEqual, Encode(me_)));
  txn.success.emplace_back(etcd::DeleteRangeRequest{key, "", false});
  Log(LogLevel::kInfo, "event=group_rank_released rank=" + std::to_string(rank_) +
                           " detail=\"drained for a notice: a spare can take the rank now\"");
  rank_ = -1;
  client_->Txn(std::move(txn), [this](Result<etcd::TxnResponse> r) {
    if (!r) Trouble("cannot give up this node's rank (its lease lapses when the machine goes)", r.error());
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
  if ((spare_ || growing_) && (key.kind == ParsedKey::Kind::kDone || key.kind == ParsedKey::Kind::kMember))
    CheckSpareFinished();
  ReleaseForGrowth(key, deleted);
  // A member key said again (not a claim: HoldForGrowth, once the node has selected).
  if (key.kind == ParsedKey::Kind::kMember && !deleted && kv.version > 1) GrowFor(key.rank);
  if (key.kind == ParsedKey::Kind::kMember && deleted) {
    const auto finished = view_.done.find(view_.epoch);
    const bool rank_done = finished != view_.done.end() && finished->second.count(key.rank) != 0;
    // A rank is lost: a spare takes it at once, not at the next retry. One whose trainer
    // finished is not lost: the job is ending.
    if (spare_ && !rank_done) ClaimRank();
    if (key.rank == rank_) {
      // Our own key is gone though our lease is not known lost: claim it again.
      if (claimed_ && lease_ != 0) {
        claimed_ = false;
        ClaimRank();
      }
      return;
    }
    if (running_epoch_ == 0 || !Runs(key.rank)) return;  // not a peer of the running (shrunken) epoch
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

void EtcdCoordinator::CheckSpareFinished() {
  if (!on_spare_finished_ || view_.epoch == 0) return;
  const auto finished = view_.done.find(view_.epoch);
  if (finished == view_.done.end() || finished->second.size() < EpochRanks(view_, view_.epoch, c_.nodes).size()) return;
  Log(LogLevel::kInfo, "event=spare_done epoch=" + std::to_string(view_.epoch) +
                           " detail=\"every rank's trainer succeeded: the job is done, and this spare with it\"");
  auto told = std::move(on_spare_finished_);
  on_spare_finished_ = nullptr;
  told();
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

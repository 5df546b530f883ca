// The multi-node coordinator; see etcd_coordinator.hpp and records.hpp. One lease per
// supervisor: its member key and its join keys live under it, so a node that vanishes
// leaves the group within coordination.lease_ttl. One prefix watch (a snapshot, then the
// events after it) keeps the view of members, joins, the epoch and the stops.
#include "spotvisor/coordination/etcd_coordinator.hpp"

#include <unistd.h>

#include <algorithm>
#include <boost/asio/io_context.hpp>
#include <array>
#include <chrono>
#include <map>
#include <optional>
#include <set>

#include "spotvisor/coordination/records.hpp"
#include "spotvisor/etcd/client.hpp"
#include "spotvisor/etcd/lease_keeper.hpp"
#include "spotvisor/etcd/watch.hpp"
#include "spotvisor/telemetry/log.hpp"
#include "spotvisor/util/timer.hpp"

namespace spotvisor::coordination {
namespace {

using supervisor::Coordinator;
using supervisor::GroupAgreedEvent;
using supervisor::ProposeResumeAction;
using supervisor::PublishStopAction;
using supervisor::StopReason;
using supervisor::StopRequestedEvent;
using telemetry::Log;
using telemetry::LogLevel;
using telemetry::Quote;

constexpr auto kRetry = std::chrono::seconds(1);
constexpr auto kTroubleEvery = std::chrono::seconds(30);  // the same trouble is said again after this

std::int64_t UnixMillisNow() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::system_clock::now().time_since_epoch())
      .count();
}

std::string HostName() {
  std::array<char, 256> host{};
  if (gethostname(host.data(), host.size() - 1) != 0) return "";
  return host.data();
}

std::string Join(const std::vector<std::string>& parts) {
  std::string out;
  for (const auto& p : parts) out += (out.empty() ? "" : ",") + p;
  return out;
}

class EtcdCoordinator final : public Coordinator {
 public:
  EtcdCoordinator(boost::asio::io_context& io, const config::JobConfig& job, std::unique_ptr<etcd::Client> client)
      : c_(job.coordination),
        base_(GroupPrefix(c_.prefix, job.job.name)),
        client_(std::move(client)),
        retry_(io),
        me_{c_.advertise, HostName(), static_cast<std::int64_t>(getpid()), UnixMillisNow()} {}

  void Start(PeerStopHandler on_peer_stop) override {
    on_peer_stop_ = std::move(on_peer_stop);
    Log(LogLevel::kInfo, "event=group_connecting etcd=" + Quote(Join(c_.etcd)) + " prefix=" + Quote(base_) +
                             " nodes=" + std::to_string(c_.nodes) + " node_rank=" +
                             (c_.node_rank == config::kAutoRank ? std::string("auto") : std::to_string(c_.node_rank)));
    Register();
  }

  void Propose(const ProposeResumeAction& proposal, AgreedHandler on_agreed) override {
    pending_ = proposal;
    on_agreed_ = std::move(on_agreed);
    running_epoch_ = 0;
    stop_delivered_ = false;
    Log(LogLevel::kInfo, "event=group_waiting nodes=" + std::to_string(c_.nodes) +
                             " good_steps=" + std::to_string(proposal.good.size()) +
                             " detail=\"waiting until every rank has joined the next epoch\"");
    if (rank_ >= 0 && synced_) PublishJoin();
  }

  void PublishStop(const PublishStopAction& stop) override {
    if (left_) return;
    if (running_epoch_ == 0) {
      // Not started yet: take back this node's join, so that the group does not start without it.
      if (pending_ && join_epoch_ != 0) client_->DeleteRange({JoinKey(base_, join_epoch_, rank_), "", false}, [](auto) {});
      pending_.reset();
      join_epoch_ = 0;
      return;
    }
    StopRecord record{rank_, stop.why, stop.grace_cap ? UnixMillisNow() + stop.grace_cap->count() : 0};
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

  void Leave(bool finished) override {
    if (left_) return;
    left_ = true;
    retry_.Cancel();
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

 private:
  // A lease, then the view of the group (its snapshot claims the rank).
  void Register() {
    if (left_) return;
    const auto ttl = std::chrono::duration_cast<std::chrono::seconds>(c_.lease_ttl).count();
    client_->LeaseGrant(ttl, [this](Result<etcd::LeaseGrantResponse> r) {
      if (left_) return;
      if (!r) {
        Trouble("cannot reach etcd at " + Join(c_.etcd), r.error());
        retry_.After(kRetry, [this] { Register(); });
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

  void OnLeaseLost(const Error& e) {
    Log(LogLevel::kError, "event=group_lease_lost rank=" + std::to_string(rank_) + " error=" + Quote(e.message) +
                              " detail=\"training goes on; taking the rank again under a new lease\"");
    lease_ = 0;
    keeper_.reset();
    claimed_ = false;
    retry_.After(std::chrono::milliseconds(0), [this] { Register(); });
  }

  void ClaimRank() {
    if (left_ || lease_ == 0 || claimed_) return;
    int want = rank_ >= 0 ? rank_ : c_.node_rank;
    if (want == config::kAutoRank) {
      auto free = LowestFreeRank(members_, c_.nodes);
      if (!free) {
        Trouble("all " + std::to_string(c_.nodes) + " ranks are held; waiting for one to be free",
                Error{"coordination.nodes = " + std::to_string(c_.nodes)});
        retry_.After(kRetry, [this] { ClaimRank(); });
        return;
      }
      want = *free;
    }
    const std::string key = MemberKey(base_, want);
    etcd::TxnRequest txn;
    // Free, or held by this very supervisor under a lease it lost (etcd was away).
    const auto held = members_.find(want);
    if (held != members_.end() && held->second.pid == me_.pid && held->second.since_unix_ms == me_.since_unix_ms) {
      txn.compare.push_back(etcd::Compare::Value(key, etcd::Compare::Result::kEqual, Encode(held->second)));
    } else {
      txn.compare.push_back(etcd::Compare::Absent(key));
    }
    txn.success.emplace_back(etcd::PutRequest{key, Encode(me_), lease_, false});
    client_->Txn(std::move(txn), [this, want](Result<etcd::TxnResponse> r) {
      if (left_ || claimed_) return;
      if (!r) {
        Trouble("cannot claim rank " + std::to_string(want), r.error());
        retry_.After(kRetry, [this] { ClaimRank(); });
        return;
      }
      if (!r->succeeded) {
        Trouble("rank " + std::to_string(want) + " is held by another node; waiting for it to be free",
                Error{"key " + MemberKey(base_, want)});
        retry_.After(kRetry, [this] { ClaimRank(); });
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

  // This node's good steps under the next epoch: one past the newest the group agreed on or
  // this node ran, or the epoch others already wait in.
  void PublishJoin() {
    if (left_ || !pending_ || !claimed_) return;
    std::uint64_t epoch = std::max(group_epoch_, last_epoch_) + 1;
    for (const auto& [e, joined] : joins_) {
      if (e > epoch && !joined.empty()) epoch = e;
    }
    if (epoch == join_epoch_) return;
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
                     retry_.After(kRetry, [this] { PublishJoin(); });
                     return;
                   }
                   if (previous != 0 && previous != epoch) {
                     client_->DeleteRange({JoinKey(base_, previous, rank_), "", false}, [](auto) {});
                   }
                   Evaluate();
                 });
  }

  void OnSnapshot(const etcd::RangeResponse& snapshot) {
    members_.clear();
    joins_.clear();
    stops_.clear();
    done_.clear();
    group_epoch_ = 0;
    for (const auto& kv : snapshot.kvs) Apply(kv, false);
    synced_ = true;
    if (!claimed_) ClaimRank();
    Evaluate();
  }

  void OnEvents(const std::vector<etcd::Event>& events) {
    for (const auto& e : events) Apply(e.kv, e.type == etcd::Event::Type::kDelete);
    Evaluate();
  }

  void OnConnection(bool connected, const std::string& why) {
    if (connected) {
      if (!trouble_.empty()) Log(LogLevel::kInfo, "event=group_reconnected etcd=" + Quote(Join(c_.etcd)));
      trouble_.clear();
    } else {
      Trouble("lost the watch on the group", Error{why});
    }
  }

  void Apply(const etcd::KeyValue& kv, bool deleted) {
    const ParsedKey key = ParseKey(base_, kv.key);
    switch (key.kind) {
      case ParsedKey::Kind::kMember:
        if (deleted) {
          members_.erase(key.rank);
          if (key.rank != rank_ && done_[running_epoch_].count(key.rank) != 0) {
            Log(LogLevel::kInfo, "event=peer_finished rank=" + std::to_string(key.rank) +
                                     " epoch=" + std::to_string(running_epoch_));
          } else if (key.rank != rank_) {
            PeerStop("node " + std::to_string(key.rank) + " left the group (its lease lapsed)", 0);
          }
          if (key.rank == rank_ && claimed_ && lease_ != 0) {
            // Our own key is gone though our lease is not known lost: claim it again.
            claimed_ = false;
            ClaimRank();
          }
        } else if (auto m = DecodeMember(kv.value)) {
          members_[key.rank] = *m;
        }
        return;
      case ParsedKey::Kind::kJoin:
        if (deleted) {
          if (auto it = joins_.find(key.epoch); it != joins_.end()) it->second.erase(key.rank);
        } else if (auto j = DecodeJoin(kv.value)) {
          joins_[key.epoch][key.rank] = *j;
        }
        return;
      case ParsedKey::Kind::kDone:
        if (!deleted) done_[key.epoch].insert(key.rank);
        return;
      case ParsedKey::Kind::kEpoch:
        group_epoch_ = deleted ? 0 : std::strtoull(kv.value.c_str(), nullptr, 10);
        return;
      case ParsedKey::Kind::kStop:
        if (deleted) return;
        if (auto s = DecodeStop(kv.value)) {
          stops_[key.epoch] = *s;
          if (key.epoch == running_epoch_ && s->rank != rank_) {
            PeerStop("node " + std::to_string(s->rank) + ": " + s->why, s->deadline_unix_ms);
          }
        }
        return;
      case ParsedKey::Kind::kOther:
        return;
    }
  }

  // The barrier: every rank in this node's epoch, then the same decision on every node.
  void Evaluate() {
    if (!pending_ || join_epoch_ == 0) return;
    for (const auto& [e, joined] : joins_) {
      if (e > join_epoch_ && !joined.empty()) {
        PublishJoin();  // others wait in a later epoch: go there
        return;
      }
    }
    const auto it = joins_.find(join_epoch_);
    if (it == joins_.end() || it->second.count(rank_) == 0 || !GroupComplete(it->second, c_.nodes)) return;
    GroupAgreedEvent agreed;
    const auto step = AgreedStep(it->second);
    if (step) {
      for (const auto& p : pending_->good) {
        if (p.step == *step) agreed.point = p;
      }
    }
    const auto master = members_.find(0);
    agreed.place.rank = rank_;
    agreed.place.world = c_.nodes;
    agreed.place.epoch = join_epoch_;
    agreed.place.master_addr = master != members_.end() ? master->second.advertise : me_.advertise;
    agreed.place.master_port = c_.master_port;
    running_epoch_ = join_epoch_;
    last_epoch_ = join_epoch_;
    join_epoch_ = 0;
    pending_.reset();
    stop_delivered_ = false;
    Log(LogLevel::kInfo, "event=group_agreed epoch=" + std::to_string(running_epoch_) + " rank=" +
                             std::to_string(rank_) + " nodes=" + std::to_string(c_.nodes) + " step=" +
                             (agreed.point ? std::to_string(agreed.point->step) : std::string("none")) +
                             " master_addr=" + Quote(agreed.place.master_addr));
    AdvanceEpochKey(running_epoch_);
    auto on_agreed = std::move(on_agreed_);
    on_agreed_ = nullptr;
    on_agreed(std::move(agreed));
    // A peer may have stopped this epoch before this node heard of the agreement.
    if (auto s = stops_.find(running_epoch_); s != stops_.end() && s->second.rank != rank_) {
      PeerStop("node " + std::to_string(s->second.rank) + ": " + s->second.why, s->second.deadline_unix_ms);
    }
  }

  // `epoch` key: the newest agreed epoch, moved forward only (a txn on its old value).
  void AdvanceEpochKey(std::uint64_t epoch) {
    if (epoch <= group_epoch_) return;
    etcd::TxnRequest txn;
    const std::string key = EpochKey(base_);
    txn.compare.push_back(group_epoch_ == 0 ? etcd::Compare::Absent(key)
                                            : etcd::Compare::Value(key, etcd::Compare::Result::kEqual,
                                                                   std::to_string(group_epoch_)));
    txn.success.emplace_back(etcd::PutRequest{key, std::to_string(epoch), 0, false});
    client_->Txn(std::move(txn), [](auto) {});  // another node may have moved it first
  }

  // Once per running epoch: the trainer stops through the usual path.
  void PeerStop(const std::string& why, std::int64_t deadline_unix_ms) {
    if (running_epoch_ == 0 || stop_delivered_ || !on_peer_stop_) return;
    stop_delivered_ = true;
    std::optional<std::chrono::milliseconds> cap;
    if (deadline_unix_ms > 0) cap = std::chrono::milliseconds(std::max<std::int64_t>(0, deadline_unix_ms - UnixMillisNow()));
    Log(LogLevel::kWarning, "event=peer_stop epoch=" + std::to_string(running_epoch_) + " why=" + Quote(why) +
                                (cap ? " grace_cap=" + FormatDuration(*cap) : std::string()));
    on_peer_stop_(StopRequestedEvent{StopReason::kPeer, cap, why});
  }

  // Said once, then again only after kTroubleEvery: etcd away must not flood the log.
  void Trouble(const std::string& what, const Error& e) {
    const auto now = std::chrono::steady_clock::now();
    auto& last = trouble_[what];
    if (last != std::chrono::steady_clock::time_point{} && now - last < kTroubleEvery) return;
    last = now;
    Log(LogLevel::kWarning, "event=group_trouble what=" + Quote(what) + " error=" + Quote(e.message) +
                                " detail=\"training goes on; spotvisor keeps trying\"");
  }

  const config::CoordinationSection& c_;  // not owned
  const std::string base_;                // <prefix>/<job>/
  std::unique_ptr<etcd::Client> client_;
  Timer retry_;                                    // the next try after trouble
  MemberRecord me_;                                // what this node's member key says
  std::unique_ptr<etcd::LeaseKeeper> keeper_;      // keeps lease_ alive
  std::unique_ptr<etcd::SnapshotWatch> watch_;     // the view below
  std::int64_t lease_ = 0;                         // 0: none yet (or lost)
  int rank_ = -1;                                  // this node's rank once claimed (kept across a lost lease)
  bool claimed_ = false;                           // members/rank_ is ours under lease_
  bool synced_ = false;                            // the first snapshot arrived
  std::map<int, MemberRecord> members_;            // rank -> who holds it
  std::map<std::uint64_t, std::map<int, JoinRecord>> joins_;  // epoch -> rank -> good steps
  std::map<std::uint64_t, StopRecord> stops_;      // epoch -> its first stop
  std::map<std::uint64_t, std::set<int>> done_;    // epoch -> ranks whose trainer succeeded
  std::uint64_t group_epoch_ = 0;                  // the `epoch` key
  std::uint64_t last_epoch_ = 0;                   // the newest epoch this node ran
  std::optional<ProposeResumeAction> pending_;     // waiting for the group
  AgreedHandler on_agreed_;                        // for pending_
  std::uint64_t join_epoch_ = 0;                   // where pending_ is published (0: not yet)
  std::uint64_t running_epoch_ = 0;                // agreed and started (0: none)
  bool stop_delivered_ = false;                    // a peer stop for running_epoch_ went out
  PeerStopHandler on_peer_stop_;
  bool left_ = false;                                                      // Leave() was called
  std::map<std::string, std::chrono::steady_clock::time_point> trouble_;  // last said, per trouble
};

}  // namespace

Result<std::unique_ptr<supervisor::Coordinator>> MakeEtcdCoordinator(boost::asio::io_context& io,
                                                                     const config::JobConfig& job) {
  etcd::ClientOptions options;
  options.endpoints = job.coordination.etcd;
  if (job.coordination.credentials) options.credentials_file = job.coordination.credentials->string();
  auto client = etcd::Client::Create(io, options);
  if (!client) return Error{"coordination.etcd: " + client.error().message};
  return std::unique_ptr<supervisor::Coordinator>(std::make_unique<EtcdCoordinator>(io, job, std::move(*client)));
}

Result<GroupView> ReadGroup(const config::JobConfig& job) {
  boost::asio::io_context io;
  etcd::ClientOptions options;
  options.endpoints = job.coordination.etcd;
  if (job.coordination.credentials) options.credentials_file = job.coordination.credentials->string();
  auto client = etcd::Client::Create(io, options);
  if (!client) return Error{"coordination.etcd: " + client.error().message};
  const std::string base = GroupPrefix(job.coordination.prefix, job.job.name);
  std::optional<Result<etcd::RangeResponse>> answer;
  (*client)->Range({base, etcd::PrefixEnd(base)}, [&answer](Result<etcd::RangeResponse> r) { answer = std::move(r); });
  const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (!answer && std::chrono::steady_clock::now() < until) io.run_for(std::chrono::milliseconds(50));
  if (!answer || !*answer) {
    return Error{"cannot read the group from etcd at " + Join(job.coordination.etcd) + ": " +
                 (answer ? answer->error().message : std::string("no answer"))};
  }
  std::vector<KeyValueText> pairs;
  for (const auto& kv : (*answer)->kvs) pairs.push_back({kv.key, kv.value});
  return ReadView(base, pairs);
}

}  // namespace spotvisor::coordination

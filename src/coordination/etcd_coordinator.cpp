// The etcd side of a multi-node job's coordinator (see etcd_coordinator.hpp): it carries out
// what the GroupFsm (group_fsm.hpp) decides — sends its requests, keeps its lease and its
// watch, arms its timers, hands its news to the local Fsm — and feeds every answer back as
// an event. It decides nothing itself. Also the factory, and the one-shot read for
// `spotvisor status`. io_context thread only.
#include "spotvisor/coordination/etcd_coordinator.hpp"

#include <unistd.h>

#include <boost/asio/io_context.hpp>
#include <deque>
#include <map>

#include "spotvisor/coordination/group_fsm.hpp"
#include "spotvisor/etcd/client.hpp"
#include "spotvisor/etcd/lease_keeper.hpp"
#include "spotvisor/etcd/watch.hpp"
#include "spotvisor/log/log.hpp"
#include "spotvisor/util/host_name.hpp"

namespace spotvisor::coordination {
namespace {

using supervisor::Coordinator;

// A failed request's error, or none.
template <class T>
std::optional<Error> ErrorOf(const Result<T>& r) {
  if (r) return std::nullopt;
  return r.error();
}

// A txn's answer as the GroupFsm reads it: whether its comparisons held, or the error.
Result<bool> Succeeded(const Result<etcd::TxnResponse>& r) {
  if (!r) return r.error();
  return r->succeeded;
}

class EtcdCoordinator final : public Coordinator {
 public:
  // `clock` (the client's too) outlives the coordinator.
  EtcdCoordinator(boost::asio::io_context& io, Clock& clock, const config::JobConfig& job,
                  std::unique_ptr<etcd::Client> client)
      : clock_(clock),
        client_(std::move(client)),
        fsm_(job.coordination, job.job.name,
             MemberRecord{job.coordination.advertise, util::ShortHostName(), static_cast<std::int64_t>(getpid()),
                          UnixMillis(clock.WallNow())}) {
    for (GroupTimer t : kGroupTimers) timers_[t] = clock.MakeTimer(io);
  }

  void Start(Handlers handlers) override {
    handlers_ = std::move(handlers);
    Feed(StartCall{});
  }
  void Propose(const supervisor::ProposeResumeAction& proposal, AgreedHandler on_agreed) override {
    on_agreed_ = std::move(on_agreed);
    on_finished_ = nullptr;  // the group did not finish: a peer stopped it
    Feed(ProposeCall{proposal});
  }
  void PublishStop(const supervisor::PublishStopAction& stop) override { Feed(PublishStopCall{stop}); }
  void PublishDone(FinishedHandler on_finished) override {
    on_finished_ = std::move(on_finished);
    Feed(PublishDoneCall{});
  }
  void ReleaseRank() override { Feed(ReleaseRankCall{}); }
  void Leave(bool finished) override { Feed(LeaveCall{finished}); }
  bool MemberForSure() const override { return keeper_ && keeper_->Fresh() && fsm_.InAgreedEpoch(); }

 private:
  // Events are handled one at a time, in order: one that a handler of the local Fsm brings
  // about while an action runs waits until the actions before it are carried out.
  void Feed(GroupEvent event) {
    queue_.push_back(std::move(event));
    if (feeding_) return;
    feeding_ = true;
    while (!queue_.empty()) {
      GroupEvent next = std::move(queue_.front());
      queue_.pop_front();
      for (auto& action : fsm_.Handle(next, {clock_.Now(), clock_.WallNow()})) Carry(std::move(action));
    }
    feeding_ = false;
  }

  void Carry(GroupAction action) {
    std::visit([this](auto& a) { Do(a); }, action);
  }

  void Do(const GrantLeaseAction& a) {
    client_->LeaseGrant(a.ttl_s, [this](Result<etcd::LeaseGrantResponse> r) {
      if (!r) return Feed(LeaseGrantFailedEvent{r.error()});
      Feed(LeaseGrantedEvent{r->id, r->ttl});
    });
  }
  void Do(const KeepLeaseAction& a) {
    keeper_ = std::make_unique<etcd::LeaseKeeper>(*client_, a.id, a.ttl_s,
                                                  [this](Error e) { Feed(LeaseLostEvent{std::move(e)}); });
    keeper_->Start();
  }
  void Do(const DropLeaseAction&) { keeper_.reset(); }
  void Do(const WatchGroupAction& a) {
    watch_ = std::make_unique<etcd::SnapshotWatch>(
        *client_, a.prefix,
        etcd::SnapshotWatchHandlers{[this](const etcd::RangeResponse& s) { Feed(SnapshotEvent{s.kvs}); },
                                    [this](const std::vector<etcd::Event>& events) { Feed(KeysChangedEvent{events}); },
                                    [this](bool connected, const std::string& why) {
                                      Feed(ConnectionEvent{connected, why});
                                    }});
    watch_->Start();
  }
  void Do(ClaimAction& a) {
    client_->Txn(std::move(a.txn), [this, rank = a.rank](Result<etcd::TxnResponse> r) {
      Feed(ClaimAnsweredEvent{rank, Succeeded(r)});
    });
  }
  void Do(PutJoinAction& a) {
    client_->Put(std::move(a.put), [this, epoch = a.epoch, previous = a.previous](Result<etcd::PutResponse> r) {
      Feed(JoinAnsweredEvent{epoch, previous, ErrorOf(r)});
    });
  }
  void Do(PutDoneAction& a) {
    client_->Put(std::move(a.put), [this, epoch = a.epoch](Result<etcd::PutResponse> r) {
      Feed(DoneAnsweredEvent{epoch, ErrorOf(r)});
    });
  }
  void Do(PublishStopTxnAction& a) {
    client_->Txn(std::move(a.txn), [this, epoch = a.epoch, why = a.why](Result<etcd::TxnResponse> r) {
      Feed(StopAnsweredEvent{epoch, why, Succeeded(r)});
    });
  }
  void Do(ShrinkAction& a) {
    client_->Txn(std::move(a.txn),
                 [this, epoch = a.epoch, ranks = a.ranks, missing = a.missing](Result<etcd::TxnResponse> r) {
                   Feed(ShrinkAnsweredEvent{epoch, ranks, missing, Succeeded(r)});
                 });
  }
  void Do(RaiseFailuresAction& a) {
    client_->Txn(std::move(a.txn), [this, count = a.count](Result<etcd::TxnResponse> r) {
      Feed(FailuresAnsweredEvent{count, Succeeded(r)});
    });
  }
  void Do(WriteAction& a) {
    auto failed = [this, trouble = a.trouble](const std::optional<Error>& e) {
      if (e && !trouble.empty()) Feed(WriteFailedEvent{trouble, *e});
    };
    std::visit(
        [this, &failed](auto& request) {
          using T = std::decay_t<decltype(request)>;
          if constexpr (std::is_same_v<T, etcd::PutRequest>)
            client_->Put(std::move(request), [failed](auto r) { failed(ErrorOf(r)); });
          if constexpr (std::is_same_v<T, etcd::DeleteRangeRequest>)
            client_->DeleteRange(std::move(request), [failed](auto r) { failed(ErrorOf(r)); });
          if constexpr (std::is_same_v<T, etcd::TxnRequest>)
            client_->Txn(std::move(request), [failed](auto r) { failed(ErrorOf(r)); });
        },
        a.request);
  }
  void Do(CloseAction& a) {
    for (auto& [t, timer] : timers_) timer->Cancel();
    watch_.reset();
    keeper_.reset();
    if (a.lease == 0) return;
    // The io_context runs until these are answered.
    const auto revoke = [this, lease = a.lease] { client_->LeaseRevoke(lease, [](auto) {}); };
    if (!a.done) return revoke();
    client_->Put(std::move(*a.done), [revoke](auto) { revoke(); });
  }
  void Do(const ArmGroupTimerAction& a) {
    timers_.at(a.timer)->After(a.after, [this, t = a.timer] { Feed(GroupTimerFiredEvent{t}); });
  }
  void Do(const CancelGroupTimerAction& a) { timers_.at(a.timer)->Cancel(); }
  void Do(TellAgreedAction& a) {
    auto on_agreed = std::move(on_agreed_);
    on_agreed_ = nullptr;
    if (on_agreed) on_agreed(std::move(a.agreed));
  }
  void Do(TellPeerStopAction& a) {
    if (handlers_.on_peer_stop) handlers_.on_peer_stop(std::move(a.stop));
  }
  void Do(const TellSpareAction& a) {
    if (!a.waiting) on_agreed_ = nullptr;  // the proposal was dropped: the Fsm selects again
    if (handlers_.on_spare) handlers_.on_spare(supervisor::GroupSpareEvent{a.waiting});
  }
  void Do(const TellGrowAction& a) {
    if (handlers_.on_grow) handlers_.on_grow(a.detail);
  }
  void Do(const TellCutOffAction&) {
    if (handlers_.on_cut_off) handlers_.on_cut_off();
  }
  void Do(const TellFinishedAction&) {
    auto on_finished = std::move(on_finished_);
    on_finished_ = nullptr;
    if (on_finished) on_finished();
  }
  void Do(const TellSpareFinishedAction&) {
    if (handlers_.on_finished) handlers_.on_finished();
  }
  void Do(const supervisor::LogAction& a) { log::Log(a.level, a.text); }

  Clock& clock_;  // the time every event is handled at, and the timers'
  std::unique_ptr<etcd::Client> client_;
  GroupFsm fsm_;
  std::map<GroupTimer, std::unique_ptr<Timer>> timers_;
  std::unique_ptr<etcd::LeaseKeeper> keeper_;
  std::unique_ptr<etcd::SnapshotWatch> watch_;
  Handlers handlers_;
  AgreedHandler on_agreed_;      // Propose's, until told
  FinishedHandler on_finished_;  // PublishDone's, until told
  std::deque<GroupEvent> queue_;
  bool feeding_ = false;
};

std::string Join(const std::vector<std::string>& parts) {
  std::string out;
  for (const auto& p : parts) out += (out.empty() ? "" : ",") + p;
  return out;
}

etcd::ClientOptions Options(const config::JobConfig& job) {
  etcd::ClientOptions options;
  options.endpoints = job.coordination.etcd;
  if (job.coordination.credentials) options.credentials_file = job.coordination.credentials->string();
  options.tls = {job.coordination.tls.ca.value_or(""), job.coordination.tls.cert.value_or(""),
                 job.coordination.tls.key.value_or("")};
  return options;
}

}  // namespace

Result<std::unique_ptr<supervisor::Coordinator>> MakeEtcdCoordinator(boost::asio::io_context& io, Clock& clock,
                                                                     const config::JobConfig& job) {
  auto client = etcd::Client::Create(io, clock, Options(job));
  if (!client) return Error{"coordination.etcd: " + client.error().message};
  return std::unique_ptr<supervisor::Coordinator>(
      std::make_unique<EtcdCoordinator>(io, clock, job, std::move(*client)));
}

Result<GroupView> ReadGroup(const config::JobConfig& job) {
  boost::asio::io_context io;
  // Real time: a one-shot command waiting on a real socket, with nothing to test in between.
  Clock& clock = SystemClock();
  auto client = etcd::Client::Create(io, clock, Options(job));
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

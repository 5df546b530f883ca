// The Asio driver of the supervisor Fsm (see driver.hpp): start-up, event dispatch, the
// journal and shutdown. Invariants: at most one trainer group exists; a ChildExitedEvent is
// delivered only once every process of the group is gone; the journal is saved after every
// event that changed the counters. Every effect on the world goes through host_.
#include "spotvisor/supervisor/driver.hpp"

#include <unistd.h>

#include <algorithm>
#include <boost/asio/post.hpp>
#include <csignal>
#include <vector>

#include "driver_impl.hpp"
#include "spotvisor/config/signals.hpp"
#include "spotvisor/log/log.hpp"
#include "spotvisor/supervisor/journal_counters.hpp"
#include "spotvisor/supervisor/stop_ladder.hpp"

namespace spotvisor::supervisor {
namespace {

namespace asio = boost::asio;
using log::Log;
using log::LogLevel;
using log::Quote;

constexpr auto kLeftoverPoll = std::chrono::milliseconds(5);

}  // namespace

Driver::Impl::Impl(const config::JobConfig& job, std::unique_ptr<checkpoint::ResumeSelector> selector,
                   std::unique_ptr<Host> host)
    : job_(job),
      selector_(selector ? std::move(selector) : checkpoint::MakeResumeSelector(job)),
      host_(std::move(host)),
      workers_poll_(host_->clock().MakeTimer(io_)),
      cut_off_sample_(host_->clock().MakeTimer(io_)),
      coordinator_(std::make_unique<LocalCoordinator>(job.coordination.master_port)) {
  for (auto kind : kTimerKinds) timers_.emplace(kind, host_->clock().MakeTimer(io_));
}

int Driver::Impl::Run() {
  // The stop and checkpoint signals are ours from the first moment: one that arrives while
  // the state opens, leftovers stop or observers start waits in the loop (a SIGTERM then
  // once killed the supervisor by its default action).
  host_->Attach(io_);
  std::vector<int> requests = job_.signals.stop_on;    // signals.stop_on: "stop"
  if (!StopsOn(SIGUSR1)) requests.push_back(SIGUSR1);  // else "checkpoint now"
  host_->WatchSignals(requests, [this](int signo) { OnSignal(signo); });
  host_->HurryOn(job_.signals.stop_on);
  pid_t holder = 0;
  auto files = host_->OpenState(job_, &holder);
  if (!files && holder != 0) {
    Log(LogLevel::kError, "event=refused reason=" + Quote(files.error().message));
    host_->Detach();
    return Code(ExitCode::kLocked);
  }
  if (!files) {
    Log(LogLevel::kCritical, "event=cannot_start reason=" + Quote(files.error().message));
    host_->Detach();
    return Code(ExitCode::kFailed);
  }
  files_ = std::move(*files);
  if (!StopLeftovers()) {
    host_->Detach();
    return Code(ExitCode::kFailed);
  }
  fsm_.emplace(job_, RestoreCounters(files_->state(), files_->ReadAttempts(), WallMillis(), host_->clock().Now()),
               static_cast<std::uint64_t>(getpid()) * 7919u);
  Log(LogLevel::kInfo, "event=supervisor_started pid=" + std::to_string(getpid()) +
                           " state_dir=" + Quote(job_.telemetry.state_dir.string()) +
                           " attempts_so_far=" + std::to_string(fsm_->counters().attempts));
  auto watcher = host_->MakeWatcher(io_, job_.provider);
  if (!watcher) {
    Log(LogLevel::kCritical, "event=cannot_start reason=" + Quote(watcher.error().message));
    host_->Detach();
    return Code(ExitCode::kConfig);
  }
  watcher_ = std::move(*watcher);
  if (watcher_) {
    watcher_->Start([this](const preemption::Notice& n) { OnNotice(n); }, [this] { OnNoticeCleared(); });
  }
  for (auto& o : observers_) o->OnStart(*this);
  coordinator_->Start(
      {[this](StopRequestedEvent stop) { asio::post(io_, [this, stop = std::move(stop)] { Dispatch(stop); }); },
       [this](GroupSpareEvent spare) { asio::post(io_, [this, spare] { Dispatch(spare); }); },
       [this] { asio::post(io_, [this] { SampleCutOffTrainer(); }); },
       [this] { asio::post(io_, [this] { Dispatch(GroupFinishedEvent{}); }); },
       [this](const std::string& detail) { asio::post(io_, [this, detail] { Dispatch(GroupGrowing(detail)); }); }});
  Dispatch(StartEvent{});
  host_->clock().Run(io_);
  // A selection still running now is stuck (a hung mount: checkpoints.select_timeout
  // passed) or no longer wanted (a drained validation at exit): waiting for it could hang
  // the exit, so its result is dropped and its thread left to finish alone.
  selections_.Abandon();
  return exit_code_;
}

void Driver::Impl::RequestStop(StopReason reason, const std::string& detail) {
  asio::post(io_, [this, reason, detail] { Dispatch(StopRequestedEvent{reason, std::nullopt, detail}); });
}

void Driver::Impl::RequestCheckpoint(const std::string& detail) {
  asio::post(io_, [this, detail] { Dispatch(CheckpointRequest(detail)); });
}

void Driver::Impl::CheckpointLanded(const std::filesystem::path& path, std::uint64_t step,
                                    std::chrono::system_clock::time_point written_at) {
  asio::post(io_, [this, path, step, written_at] { Dispatch(CheckpointLandedEvent{path, step, written_at}); });
}

void Driver::Impl::CheckpointArriving(const std::filesystem::path& path,
                                      std::optional<std::chrono::system_clock::time_point> written_at) {
  asio::post(io_, [this, path, written_at] { Dispatch(CheckpointArrivingEvent{path, written_at}); });
}

void Driver::Impl::CheckpointWriting(const std::filesystem::path& path) {
  asio::post(io_, [this, path] { Dispatch(CheckpointWritingEvent{path}); });
}

// The Fsm decides; the fact it needs is read here, at the moment of the request (a trainer
// installs its handler some time after it starts).
CheckpointRequestedEvent Driver::Impl::CheckpointRequest(const std::string& detail) const {
  CheckpointRequestedEvent e{detail};
  if (trainer_) e.nobody_catches = trainer_->Catchers(job_.signals.checkpoint, job_.signals.Recipients()) == 0;
  return e;
}

// Whether the trainer saves on the stop, and on request, read now (no trainer: nothing to
// wait for, as if it saved on the stop).
HandlersSampledEvent Driver::Impl::Handlers() const {
  const auto to = job_.signals.Recipients();
  return {!trainer_ || trainer_->Catchers(job_.signals.on_notice, to) > 0,
          trainer_ && trainer_->Catchers(job_.signals.checkpoint, to) > 0};
}

// Read when its turn comes, after the actions of the decision that asked for it.
void Driver::Impl::Perform(const SampleHandlersAction&) {
  asio::post(io_, [this] { Dispatch(Handlers()); });
}

// The same for a growth of the group.
GroupGrowingEvent Driver::Impl::GroupGrowing(const std::string& detail) const {
  const auto handlers = Handlers();
  return {detail, handlers.stop_caught, handlers.checkpoint_caught, host_->clock().WallNow()};
}

// A child of a SIGKILLed supervisor died with it (PDEATHSIG), but its group may live on.
bool Driver::Impl::StopLeftovers() {
  const auto& child = files_->state().child;
  if (!child) return true;
  auto pids = host_->Leftovers(*child);
  if (pids.empty()) return true;
  Log(LogLevel::kWarning,
      "event=leftover_found pgid=" + std::to_string(child->pid) + " processes=" + std::to_string(pids.size()) +
          " detail=\"the previous supervisor's trainer group is still alive; stopping it before starting\"");
  // The ladder (stop_ladder.hpp) decides; this only sends, polls and sleeps.
  StopLadder ladder(LeftoverLadder(job_.signals.on_notice, job_.signals.grace, job_.signals.kill_timeout));
  for (;;) {
    const auto now = host_->clock().Now();
    const auto step = ladder.Next(host_->Leftovers(*child).empty(), now);
    if (step.move == StopLadder::Move::kSignal) host_->SignalGroup(child->pid, step.signo);
    if (step.move == StopLadder::Move::kWait) {
      host_->clock().Sleep(std::min<Duration>(kLeftoverPoll, std::chrono::ceil<Duration>(step.until - now)));
    }
    if (step.move == StopLadder::Move::kStopped) {
      Log(LogLevel::kInfo,
          "event=leftover_stopped pgid=" + std::to_string(child->pid) + " signal=" + config::SignalName(step.signo));
      return true;
    }
    if (step.move == StopLadder::Move::kGiveUp) break;
  }
  Log(LogLevel::kCritical, "event=cannot_start reason=\"leftover processes of group " + std::to_string(child->pid) +
                               " survive SIGKILL; refusing to start a second trainer\"");
  return false;
}

void Driver::Impl::OnSignal(int signo) {
  if (!StopsOn(signo)) {
    Dispatch(CheckpointRequest("SIGUSR1 to spotvisor"));
    return;
  }
  for (auto& o : observers_) o->OnStopSignal(signo);
  Dispatch(StopRequestedEvent{StopReason::kSignal, std::nullopt, config::SignalName(signo) + " to spotvisor"});
}

bool Driver::Impl::StopsOn(int signo) const {
  const auto& on = job_.signals.stop_on;
  return std::find(on.begin(), on.end(), signo) != on.end();
}

void Driver::Impl::Dispatch(const Event& event) {
  if (finished_) return;
  const Phase before = fsm_->phase();
  for (const Action& action : fsm_->Handle(event, host_->clock().Now())) {
    std::visit([this](const auto& a) { Perform(a); }, action);
    if (finished_) break;
  }
  const Phase after = fsm_->phase();
  if (after != before) {
    for (auto& o : observers_) o->OnPhase(after);
  }
  SaveState();
}

void Driver::Impl::Perform(const ArmTimerAction& a) {
  timers_.at(a.kind)->At(a.at, [this, kind = a.kind] { Dispatch(TimerFiredEvent{kind}); });
}

void Driver::Impl::Perform(const CancelTimerAction& a) { timers_.at(a.kind)->Cancel(); }

void Driver::Impl::Perform(const AttemptEndedAction& a) {
  current_.ended_ms = WallMillis();
  if (a.status.signal != 0) {
    current_.signal = a.status.signal;
  } else {
    current_.exit_code = a.status.code;
  }
  current_.outcome = std::string(ToString(a.outcome));
  current_.next = a.next;
  if (!a.stopped_by.empty()) current_.stopped_by = a.stopped_by;
  Log(a.outcome == Outcome::kDone ? LogLevel::kInfo : LogLevel::kWarning,
      "event=attempt_ended attempt=" + std::to_string(current_.attempt) + " outcome=" + current_.outcome +
          " status=" + Quote(Describe(a.status)) + " next=" + Quote(a.next) +
          (a.stopped_by.empty() ? std::string() : " stopped_by=" + Quote(a.stopped_by)));
  if (Status s = files_->AppendAttempt(current_); !s) JournalTrouble(s.error().message);
  for (auto& o : observers_) o->OnAttemptEnded(current_);
}

void Driver::Impl::Perform(const LogAction& a) { Log(a.level, a.text); }

// job.stop_exit_code stands for the Fsm's kStopped (Kubernetes wants 129-255, systemd 75).
void Driver::Impl::Perform(const ExitAction& a) {
  Shutdown(a.code == ExitCode::kStopped ? job_.job.stop_exit_code : Code(a.code), a.message);
}

void Driver::Impl::Shutdown(int code, const std::string& message) {
  if (finished_) return;
  finished_ = true;
  exit_code_ = code;
  persisted_.last_exit_message = message;
  const LogLevel level = code == 0 || code == job_.job.stop_exit_code ? LogLevel::kInfo : LogLevel::kError;
  Log(level, "event=exit code=" + std::to_string(code) + " message=" + Quote(message));
  for (auto& [kind, timer] : timers_) timer->Cancel();
  workers_poll_->Cancel();
  cut_off_sample_->Cancel();
  if (watcher_) watcher_->Stop();
  coordinator_->Leave(code == Code(ExitCode::kDone));
  host_->Detach();
  SaveState(/*force=*/true);
  for (auto& o : observers_) o->OnExit(code, message);
}

void Driver::Impl::SaveState(bool force) {
  if (!files_ || !fsm_) return;
  state::PersistedState s = persisted_;
  s.job = job_.job.name;
  StoreCounters(fsm_->counters(), WallMillis(), host_->clock().Now(), s);
  s.phase = PhaseName(fsm_->phase());
  if (!force && SameForTheJournal(s, files_->state())) return;
  // Mid-run saves are atomic but not fsynced (attempts.jsonl is the durable record and a
  // power cut leaves no process to find); the last one is durable.
  const std::size_t held = files_->unwritten_attempts();
  Status st = files_->Save(s, force ? Durability::kDurable : Durability::kAtomicOnly);
  if (st) st = files_->FlushAttempts();  // attempt lines a full or read-only dir refused
  if (!st) {
    JournalTrouble(st.error().message);
  } else if (journal_trouble_) {
    journal_trouble_ = false;
    Log(LogLevel::kInfo, "event=state_writable_again dir=" + Quote(job_.telemetry.state_dir.string()) +
                             " attempts_appended=" + std::to_string(held));
  }
}

// Said once per change of condition; supervision goes on without a journal.
void Driver::Impl::JournalTrouble(const std::string& message) {
  if (journal_trouble_) return;
  journal_trouble_ = true;
  Log(LogLevel::kError, "event=state_write_failed error=" + Quote(message) +
                            " detail=\"supervising on; the journal will be rewritten when the state dir is writable\"");
}

Driver::Driver(const config::JobConfig& job, std::unique_ptr<checkpoint::ResumeSelector> selector,
               std::unique_ptr<Host> host)
    : impl_(std::make_unique<Impl>(job, std::move(selector), std::move(host))) {}
Driver::~Driver() = default;
void Driver::AddObserver(std::unique_ptr<RunObserver> observer) { impl_->AddObserver(std::move(observer)); }
Status Driver::UseCoordinator(const CoordinatorFactory& make) {
  auto coordinator = make(impl_->io(), impl_->clock());
  if (!coordinator) return coordinator.error();
  impl_->SetCoordinator(std::move(*coordinator));
  return Ok{};
}
void Driver::RecordSlurmRestartCount(std::optional<int> count) { impl_->SetSlurmRestartCount(count); }
int Driver::Run() { return impl_->Run(); }

}  // namespace spotvisor::supervisor

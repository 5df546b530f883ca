// The Asio driver of the supervisor Fsm (see driver.hpp): start-up, event dispatch, the
// journal and shutdown; the trainer's start, signals and end; notices and checkpoint
// selection. Invariants: at most one trainer group exists; a ChildExitedEvent is delivered
// only once every process of the group is gone; the journal is saved after every event that
// changed the counters. Every effect on the world goes through host_. io thread only, but
// for the selection, which runs on `selections_` (selection_worker.hpp) and posts its answer
// back.
#include "spotvisor/supervisor/driver.hpp"

#include <unistd.h>

#include <algorithm>
#include <boost/asio/io_context.hpp>
#include <boost/asio/post.hpp>
#include <chrono>
#include <csignal>
#include <cstdint>
#include <filesystem>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "child_environment.hpp"
#include "selection_worker.hpp"
#include "spotvisor/config/signals.hpp"
#include "spotvisor/log/log.hpp"
#include "spotvisor/preemption/time_format.hpp"
#include "spotvisor/state/journal.hpp"
#include "spotvisor/supervisor/coordinator.hpp"
#include "spotvisor/supervisor/fsm.hpp"
#include "spotvisor/supervisor/host.hpp"
#include "spotvisor/supervisor/journal_counters.hpp"
#include "spotvisor/supervisor/stop_ladder.hpp"
#include "spotvisor/util/clock.hpp"
#include "spotvisor/util/result.hpp"

namespace spotvisor::supervisor {
namespace {

namespace asio = boost::asio;
using log::Log;
using log::LogLevel;
using log::Quote;

constexpr auto kLeftoverPoll = std::chrono::milliseconds(5);
constexpr auto kWorkersPoll = std::chrono::milliseconds(100);  // a launcher's workers, while they stop
// How long a cut-off node's trainer is watched before the Fsm judges it (GroupCutOffEvent).
constexpr auto kCutOffSample = std::chrono::seconds(2);

const char* ActionName(preemption::NoticeAction action) {
  return action == preemption::NoticeAction::kStop ? "stop" : "checkpoint";
}

}  // namespace

class Driver::Impl final : public RunControl {
 public:
  Impl(const config::JobConfig& job, std::unique_ptr<checkpoint::ResumeSelector> selector, std::unique_ptr<Host> host);

  int Run();
  void AddObserver(std::unique_ptr<RunObserver> observer) { observers_.push_back(std::move(observer)); }
  void SetCoordinator(std::unique_ptr<Coordinator> coordinator) { coordinator_ = std::move(coordinator); }
  void SetSlurmRestartCount(std::optional<int> count) { slurm_restart_count_ = count; }
  // The host's wall clock in Unix milliseconds (the journal's unit).
  std::int64_t WallMillis() const { return UnixMillis(host_->clock().WallNow()); }

  // ---- RunControl ----
  boost::asio::io_context& io() override { return io_; }
  Clock& clock() override { return host_->clock(); }
  const config::JobConfig& job() const override { return job_; }
  pid_t child_pid() const override { return trainer_ ? trainer_->pid() : 0; }
  process::ChildTable& children() override { return host_->children(); }
  bool ExitHurried() const override { return host_->Hurried(); }
  bool MemberForSure() const override { return coordinator_->MemberForSure(); }
  void RequestStop(StopReason reason, const std::string& detail) override;
  void RequestCheckpoint(const std::string& detail) override;
  void CheckpointLanded(const std::filesystem::path& path, std::uint64_t step,
                        std::chrono::system_clock::time_point written_at) override;
  void CheckpointWriting(const std::filesystem::path& path) override;
  void CheckpointArriving(const std::filesystem::path& path,
                          std::optional<std::chrono::system_clock::time_point> written_at) override;

 private:
  // Start-up, dispatch, the journal, shutdown.
  bool StopLeftovers();
  void OnSignal(int signo);
  bool StopsOn(int signo) const;  // signo is in signals.stop_on
  // "Checkpoint now", with whether any process of signals.target catches the signal.
  CheckpointRequestedEvent CheckpointRequest(const std::string& detail) const;
  HandlersSampledEvent Handlers() const;
  void Perform(const SampleHandlersAction&);  // HandlersSampledEvent, next on the loop
  GroupGrowingEvent GroupGrowing(const std::string& detail) const;
  void Dispatch(const Event& event);
  void Perform(const ArmTimerAction& a);
  void Perform(const CancelTimerAction& a);
  void Perform(const AttemptEndedAction& a);
  void Perform(const LogAction& a);
  void Perform(const ExitAction& a);
  void Shutdown(int code, const std::string& message);
  void SaveState(bool force = false);
  void JournalTrouble(const std::string& message);

  // The trainer: its start, the Fsm's signals, its launcher's workers while they stop, and
  // its end (the main process first, then the whole group: leftovers get SIGKILL up to
  // signals.kill_timeout).
  void Perform(const SpawnAction& a);
  void Perform(const SignalAction& a);
  void Perform(const FreezeTrainerAction&);
  void Perform(const ThawTrainerAction&);
  void Perform(const HoldLaunchersAction&);
  void Perform(const ReleaseLaunchersAction& a);
  void Perform(const WatchWorkersAction&);
  void PollWorkers();
  // The coordinator says this node is cut off: the trainer's CPU for kCutOffSample, then
  // GroupCutOffEvent (the Fsm decides).
  void SampleCutOffTrainer();  // WatchWorkersAction's poll, every kWorkersPoll while the trainer stops
  void Perform(const KillGroupAction&);
  void OnTrainerExited(ExitStatus status);
  void TrainerGone();

  // Notices and selection: a notice becomes a stop (grace capped by its deadline) or a
  // checkpoint request, and is written to the notice file; a cleared notice resumes after
  // provider.resume_after; the selection runs on the selection worker and comes back as an
  // event, and the start it allows is agreed through the coordinator.
  void Perform(const SelectResumeAction&);
  void OnSelected(Result<checkpoint::Selection> selection);
  void Perform(const ProposeResumeAction& a);
  void Perform(const PublishStopAction& a);
  void Perform(const PublishDoneAction& a);
  void Perform(const ValidateDrainedAction&);
  void Perform(const AcknowledgeNoticeAction&);
  void Perform(const ReleaseRankAction&);
  void OnNotice(const preemption::Notice& n);
  void OnNoticeCleared();
  void WriteNoticeFile(const preemption::Notice& n);

  const config::JobConfig& job_;                          // not owned
  boost::asio::io_context io_;                            // the one event loop; outlives the host
  std::shared_ptr<checkpoint::ResumeSelector> selector_;  // used by selections_ only
  std::unique_ptr<Host> host_;                            // every effect on the world
  std::map<TimerKind, std::unique_ptr<Timer>> timers_;    // armed by the Fsm
  std::unique_ptr<Timer> workers_poll_;                   // waiting for a launcher's workers to stop
  std::unique_ptr<Timer> cut_off_sample_;                 // the trainer's CPU, sampled once cut off
  std::unique_ptr<preemption::Watcher> watcher_;          // null for provider none
  std::unique_ptr<Coordinator> coordinator_;              // agrees on each start, hears the group's stops
  std::optional<preemption::Notice> notice_;              // the stop notice being handled
  std::vector<std::shared_ptr<RunObserver>> observers_;   // see run_observer.hpp (shared with selections)
  std::unique_ptr<StateFiles> files_;                     // the lock held, the journal: the job's memory
  std::optional<Fsm> fsm_;                                // the policy
  state::PersistedState persisted_;                       // driver-owned parts of the state
  state::AttemptRecord current_;                          // the attempt in progress
  std::optional<int> slurm_restart_count_;                // recorded with every attempt
  std::unique_ptr<Trainer> trainer_;                      // the running trainer's group, if any
  TimePoint trainer_started_{};                           // for uptime
  std::optional<ExitStatus> main_status_;                 // main process gone, group maybe not
  bool journal_trouble_ = false;                          // state dir not writable
  bool finished_ = false;                                 // Exit performed
  int exit_code_ = Code(ExitCode::kFailed);               // what Run returns
  SelectionWorker selections_{io_, host_->clock()};       // last: abandoned first, before io_ goes
};

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

// ---- the trainer ----

void Driver::Impl::Perform(const SpawnAction& a) {
  // The attempt's record from the start: a start that fails is an attempt of its own too.
  current_ = state::AttemptRecord{};
  current_.attempt = a.attempt;
  current_.started_ms = WallMillis();
  current_.slurm_restart_count = slurm_restart_count_;
  current_.epoch = a.place.epoch;
  current_.nodes = a.place.world;
  if (a.resume) {
    current_.resume_from = a.resume->path.string();
    current_.resume_step = a.resume->step;
  }
  auto spec = BuildSpawnSpec(job_, a);
  if (!spec) {
    asio::post(io_, [this, message = spec.error().message] { Dispatch(SpawnFailedEvent{message}); });
    return;
  }
  files_->BeforeStart();  // a resumed trainer starts without a notice
  auto started = host_->Spawn(
      *spec, [this](ExitStatus status) { OnTrainerExited(status); },
      [this](std::string_view line) {
        for (auto& o : observers_) o->OnTrainerLine(line);
      });
  if (!started) {
    asio::post(io_, [this, message = started.error().message] { Dispatch(SpawnFailedEvent{message}); });
    return;
  }
  trainer_ = std::move(*started);
  const pid_t pid = trainer_->pid();
  trainer_started_ = host_->clock().Now();
  persisted_.child = trainer_->Identity();
  persisted_.last_epoch = a.place.epoch;
  persisted_.last_epoch_step = a.resume ? a.resume->step : 0;
  current_.pid = pid;
  // The start and the child's identity are on disk before anyone hears of it: a supervisor
  // SIGKILLed now still counts this attempt and finds its trainer when it comes back.
  SaveState();
  std::string argv;
  for (const auto& arg : spec->argv) argv += (argv.empty() ? "" : " ") + arg;
  Log(LogLevel::kInfo, "event=trainer_started attempt=" + std::to_string(a.attempt) + " pid=" + std::to_string(pid) +
                           " resume=" + Quote(a.resume ? a.resume->path.string() : "none") + " argv=" + Quote(argv) +
                           " signal_target=" + config::ToString(job_.signals.Recipients()) +
                           " signal_target_why=" + Quote(job_.signals.target_why));
  for (auto& o : observers_) o->OnAttemptStarted(a, pid);
}

void Driver::Impl::Perform(const SignalAction& a) {
  if (!trainer_) return;
  const std::size_t reached = trainer_->Send(a.signo, a.to, a.only_to_handlers);
  const char* none = a.to == config::SignalTarget::kWorkers ? " result=\"the launcher has no worker now\""
                                                            : " result=\"no such process\"";
  const std::size_t skipped = trainer_->LastSkipped();
  Log(reached > 0 ? LogLevel::kInfo : LogLevel::kWarning,
      "event=signal_sent signal=" + config::SignalName(a.signo) + " target=" + config::ToString(a.to) +
          " pid=" + std::to_string(trainer_->pid()) + " processes=" + std::to_string(reached) +
          (a.to == config::SignalTarget::kWorkers ? " workers=" + trainer_->LastPids() : "") +
          (skipped > 0 ? " skipped=" + std::to_string(skipped) + " skipped_why=\"no handler for it\"" : "") +
          (reached > 0 ? "" : none));
  if (reached > 0) {
    for (auto& o : observers_) o->OnSignalSent(a.signo, a.to);
  }
}

void Driver::Impl::Perform(const FreezeTrainerAction&) {
  if (!trainer_) return;
  const std::size_t n = trainer_->Pause(true);
  Log(LogLevel::kInfo, "event=signal_sent signal=SIGSTOP target=trainer pid=" + std::to_string(trainer_->pid()) +
                           " processes=" + std::to_string(n) + " detail=\"paused while its checkpoint is judged\"");
}

void Driver::Impl::Perform(const ThawTrainerAction&) {
  if (!trainer_) return;
  const std::size_t n = trainer_->Pause(false);
  Log(LogLevel::kInfo, "event=signal_sent signal=SIGCONT target=trainer pid=" + std::to_string(trainer_->pid()) +
                           " processes=" + std::to_string(n));
}

void Driver::Impl::Perform(const HoldLaunchersAction&) {
  if (!trainer_) return;
  const std::size_t held = trainer_->HoldLaunchers();
  Log(LogLevel::kInfo,
      "event=signal_sent signal=SIGSTOP target=launcher pid=" + std::to_string(trainer_->pid()) +
          " processes=" + std::to_string(held) +
          " detail=\"the launcher waits, paused, while its workers stop: it neither restarts nor kills them\"");
}

void Driver::Impl::Perform(const ReleaseLaunchersAction& a) {
  if (!trainer_) return;
  const std::size_t released = trainer_->ReleaseLaunchers(a.signo);
  const std::string sent = a.signo != 0 ? config::SignalName(a.signo) + "+SIGCONT" : "SIGCONT";
  Log(LogLevel::kInfo, "event=signal_sent signal=" + sent + " target=launcher pid=" + std::to_string(trainer_->pid()) +
                           " processes=" + std::to_string(released));
}

void Driver::Impl::Perform(const WatchWorkersAction&) { PollWorkers(); }

void Driver::Impl::PollWorkers() {
  workers_poll_->After(kWorkersPoll, [this] {
    if (!trainer_ || fsm_->phase() != Phase::kStopping) return;
    if (trainer_->WorkersGone()) {
      Dispatch(WorkersGoneEvent{});
      return;
    }
    const WorkersActivity workers = trainer_->Workers();
    Dispatch(WorkersSampledEvent{workers.cpu_ticks, workers.all_in_socket_waits});  // the Fsm judges a stall
    PollWorkers();
  });
}

void Driver::Impl::SampleCutOffTrainer() {
  const int attempt = fsm_->counters().attempts;
  if (!trainer_) {
    Dispatch(GroupCutOffEvent{attempt, std::nullopt, std::chrono::milliseconds(0)});
    return;
  }
  const pid_t pid = trainer_->pid();
  const std::uint64_t before = trainer_->GroupCpuTicks();
  cut_off_sample_->After(kCutOffSample, [this, attempt, pid, before] {
    std::optional<std::chrono::milliseconds> used;
    if (trainer_ && trainer_->pid() == pid) {
      const std::uint64_t after = trainer_->GroupCpuTicks();
      // A process that exited takes its ticks along: less than before counts as none.
      const std::uint64_t ticks = after > before ? after - before : 0;
      used = std::chrono::milliseconds(ticks * 1000 / static_cast<std::uint64_t>(sysconf(_SC_CLK_TCK)));
    }
    Dispatch(GroupCutOffEvent{attempt, used, std::chrono::duration_cast<std::chrono::milliseconds>(kCutOffSample)});
  });
}

void Driver::Impl::Perform(const KillGroupAction&) {
  if (!trainer_) return;
  const std::size_t n = trainer_->KillGroup();
  // What each process was doing when it would not stop: the first clue to a hung save.
  Log(LogLevel::kWarning, "event=signal_sent signal=SIGKILL target=group pid=" + std::to_string(trainer_->pid()) +
                              " processes=" + std::to_string(n) +
                              (n > 0 ? " states=" + Quote(trainer_->KilledStates()) : ""));
}

// The main process is gone; its group may not be (a worker that ignores SIGTERM, a
// daemonized grandchild): those get SIGKILL, and the attempt ends once all are gone.
void Driver::Impl::OnTrainerExited(ExitStatus status) {
  if (!trainer_ || main_status_ || finished_) return;
  main_status_ = status;
  Log(LogLevel::kInfo,
      "event=trainer_exited pid=" + std::to_string(trainer_->pid()) + " status=" + Quote(Describe(status)) +
          " uptime_ms=" +
          std::to_string(
              std::chrono::duration_cast<std::chrono::milliseconds>(host_->clock().Now() - trainer_started_).count()));
  if (!trainer_->GroupGone()) {
    Log(LogLevel::kWarning, "event=group_leftovers pgid=" + std::to_string(trainer_->pid()) +
                                " detail=\"processes of the trainer's group outlived it: SIGKILL\"");
  }
  trainer_->AwaitGroupGone(job_.signals.kill_timeout, [this](bool gone) {
    if (finished_ || !trainer_) return;
    if (!gone) {
      Dispatch(GroupSurvivedKillEvent{trainer_->pid()});
      return;
    }
    TrainerGone();
  });
}

// The trainer's group is gone, so its pipes are near EOF: its last lines are relayed (within
// kOutputDrain) before anyone hears of the exit, and the log reads in the order it happened.
void Driver::Impl::TrainerGone() {
  if (!trainer_->OutputDone()) {
    trainer_->DrainOutput(kOutputDrain, [this] {
      if (!finished_ && trainer_) TrainerGone();
    });
    return;
  }
  const ExitStatus status = *main_status_;
  trainer_.reset();
  workers_poll_->Cancel();
  main_status_.reset();
  persisted_.child.reset();
  Dispatch(ChildExitedEvent{status});
}

// ---- notices and selection ----

void Driver::Impl::Perform(const SelectResumeAction&) {
  selections_.Post(
      [selector = selector_, observers = observers_] {
        for (const auto& o : observers) o->BeforeSelection();
        return selector->SelectForResume();
      },
      [this](Result<checkpoint::Selection> selection) { OnSelected(std::move(selection)); });
}

void Driver::Impl::OnSelected(Result<checkpoint::Selection> selection) {
  if (!selection) {
    Dispatch(SelectionFailedEvent{selection.error().message});
    return;
  }
  for (auto& o : observers_) o->OnSelection(*selection);  // (the catalog logged each rejection)
  Dispatch(ResumeSelectedEvent{checkpoint::GoodSteps(*selection)});
}

void Driver::Impl::Perform(const ProposeResumeAction& a) {
  // The answer may come before Propose returns: it enters the Fsm on a later turn.
  coordinator_->Propose(a, [this](GroupAgreedEvent agreed) {
    asio::post(io_, [this, agreed = std::move(agreed)] { Dispatch(agreed); });
  });
}

void Driver::Impl::Perform(const PublishStopAction& a) { coordinator_->PublishStop(a); }

void Driver::Impl::Perform(const PublishDoneAction&) {
  coordinator_->PublishDone([this] { asio::post(io_, [this] { Dispatch(GroupFinishedEvent{}); }); });
}

void Driver::Impl::OnNotice(const preemption::Notice& n) {
  const auto now = host_->clock().WallNow();
  std::optional<std::chrono::milliseconds> until_deadline;
  if (n.deadline) until_deadline = std::chrono::duration_cast<std::chrono::milliseconds>(*n.deadline - now);
  Log(LogLevel::kWarning, "event=notice provider=" + n.provider + " kind=" + n.kind +
                              " action=" + ActionName(n.action) + " id=" + Quote(n.id) +
                              " deadline=" + (n.deadline ? preemption::FormatIso8601(*n.deadline) : "none") +
                              " warning_ms=" + (until_deadline ? std::to_string(until_deadline->count()) : "unknown") +
                              " detail=" + Quote(n.detail));
  for (auto& o : observers_) o->OnNotice(n);
  if (n.action == preemption::NoticeAction::kCheckpoint) {
    Dispatch(CheckpointRequest(n.provider + " " + n.kind));
    return;
  }
  notice_ = n;
  WriteNoticeFile(n);
  StopRequestedEvent stop{StopReason::kNotice, std::nullopt, n.provider + " " + n.kind,
                          NoticeDeadline{until_deadline, now}};
  // Whether the stop would save anything: the Fsm decides whether to defer it.
  stop.nobody_catches = trainer_ && trainer_->Catchers(job_.signals.on_notice, job_.signals.Recipients()) == 0;
  Dispatch(stop);
}

// The Fsm waits provider.resume_after before it resumes; a withdrawn notice is never
// acknowledged.
void Driver::Impl::OnNoticeCleared() {
  notice_.reset();
  Dispatch(NoticeClearedEvent{});
}

void Driver::Impl::Perform(const AcknowledgeNoticeAction&) {
  if (watcher_ && notice_) watcher_->Acknowledge(*notice_);
}

void Driver::Impl::Perform(const ReleaseRankAction&) { coordinator_->ReleaseRank(); }

// Drained: find (and fully validate) the checkpoint a resume would use, and record it;
// the Fsm then has the provider told (DrainedValidatedEvent).
void Driver::Impl::Perform(const ValidateDrainedAction&) {
  selections_.Post(
      [selector = selector_] { return selector->SelectForResume(); },
      [this](const Result<checkpoint::Selection>& selection) {
        if (finished_) return;
        if (!selection) {
          Log(LogLevel::kError, "event=drained_validation_failed error=" + Quote(selection.error().message));
        } else {
          for (auto& o : observers_) o->OnSelection(*selection);  // (the catalog logged each rejection)
          Log(LogLevel::kWarning,
              "event=drained newest_good=" + Quote(selection->chosen ? selection->chosen->path.string() : "none") +
                  " step=" + (selection->chosen ? std::to_string(selection->chosen->step) : "none"));
        }
        Dispatch(DrainedValidatedEvent{});
      });
}

void Driver::Impl::WriteNoticeFile(const preemption::Notice& n) {
  nlohmann::json j{{"provider", n.provider},
                   {"kind", n.kind},
                   {"action", ActionName(n.action)},
                   {"id", n.id},
                   {"detail", n.detail},
                   {"received_at", preemption::FormatIso8601(host_->clock().WallNow())}};
  j["deadline"] = n.deadline ? nlohmann::json(preemption::FormatIso8601(*n.deadline)) : nlohmann::json(nullptr);
  if (Status s = files_->WriteNotice(j.dump(2) + "\n"); !s) {
    Log(LogLevel::kError, "event=notice_file_failed error=" + Quote(s.error().message));
  }
}

}  // namespace spotvisor::supervisor

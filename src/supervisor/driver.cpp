// The Asio driver of the supervisor Fsm; see driver.hpp. Invariants: at most one child
// group exists; a ChildExitedEvent is delivered only once every process of the group is
// gone (we are a child subreaper, so orphaned grandchildren are reaped here too); the
// journal is saved after every event that changed the counters.
#include "spotvisor/supervisor/driver.hpp"

#include <sys/prctl.h>
#include <sys/wait.h>

#include <boost/asio/io_context.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/signal_set.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/thread_pool.hpp>
#include <csignal>
#include <ctime>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <thread>

#include "child_environment.hpp"
#include "journal_counters.hpp"
#include "trainer_signals.hpp"
#include "spotvisor/config/signals.hpp"
#include "spotvisor/process/output_relay.hpp"
#include "spotvisor/process/process_group.hpp"
#include "spotvisor/process/spawn.hpp"
#include "spotvisor/state/job_lock.hpp"
#include "spotvisor/state/journal.hpp"
#include "spotvisor/supervisor/fsm.hpp"
#include "spotvisor/supervisor/notice_grace.hpp"
#include "spotvisor/preemption/watcher.hpp"
#include "spotvisor/telemetry/log.hpp"
#include "spotvisor/util/atomic_file.hpp"

namespace spotvisor::supervisor {
namespace {

namespace asio = boost::asio;
using telemetry::Log;
using telemetry::LogLevel;
using telemetry::Quote;
using std::chrono::steady_clock;

constexpr auto kGroupPoll = std::chrono::milliseconds(5);
constexpr auto kWorkersPoll = std::chrono::milliseconds(100);  // a launcher's workers, while they stop
constexpr auto kOutputDrain = std::chrono::milliseconds(2000);  // relaying a gone trainer's last output

ExitStatus FromWaitStatus(int status) {
  if (WIFSIGNALED(status)) return ExitStatus{0, WTERMSIG(status)};
  return ExitStatus{WEXITSTATUS(status), 0};
}

}  // namespace

class Driver::Impl final : public RunControl {
 public:
  Impl(const config::JobConfig& job, std::unique_ptr<checkpoint::ResumeSelector> selector)
      : job_(job),
        selector_(selector ? std::move(selector) : checkpoint::MakeResumeSelector(job)),
        signals_(io_, SIGINT, SIGTERM, SIGHUP),
        children_(io_, SIGCHLD),
        group_poll_(io_),
        workers_poll_(io_),
        resume_timer_(io_) {
    signals_.add(SIGUSR1);
    for (auto kind : {TimerKind::kGrace, TimerKind::kKill, TimerKind::kBackoff}) {
      timers_.emplace(kind, asio::steady_timer(io_));
    }
  }

  int Run() {
    pid_t holder = 0;
    auto lock = state::JobLock::Acquire(job_.telemetry.state_dir, &holder);
    if (!lock) {
      Log(LogLevel::kError, "event=refused reason=" + Quote(lock.error().message));
      return holder != 0 ? Code(ExitCode::kLocked) : Code(ExitCode::kFailed);
    }
    lock_.emplace(std::move(*lock));
    auto journal = state::Journal::Open(job_.telemetry.state_dir);
    if (!journal) {
      Log(LogLevel::kCritical, "event=cannot_start reason=" + Quote(journal.error().message));
      return Code(ExitCode::kFailed);
    }
    journal_.emplace(std::move(*journal));
    if (!StopLeftovers()) return Code(ExitCode::kFailed);
    prctl(PR_SET_CHILD_SUBREAPER, 1);
    // Our stdout/stderr may be a pipe whose reader goes away (`| head`, a dead log
    // collector): a write must fail with EPIPE, not kill the supervisor and so the trainer.
    // Not a handler, only a disposition; the child starts with SIG_DFL for every signal.
    std::signal(SIGPIPE, SIG_IGN);
    fsm_.emplace(job_,
                 RestoreCounters(journal_->state(), journal_->ReadAttempts(), state::UnixMillisNow(), steady_clock::now()),
                 static_cast<std::uint64_t>(getpid()) * 7919u);
    Log(LogLevel::kInfo, "event=supervisor_started pid=" + std::to_string(getpid()) +
                             " state_dir=" + Quote(job_.telemetry.state_dir.string()) +
                             " attempts_so_far=" + std::to_string(fsm_->counters().attempts));
    auto watcher = preemption::MakeWatcher(io_, job_.provider);
    if (!watcher) {
      Log(LogLevel::kCritical, "event=cannot_start reason=" + Quote(watcher.error().message));
      return Code(ExitCode::kConfig);
    }
    watcher_ = std::move(*watcher);
    if (watcher_) {
      watcher_->Start([this](const preemption::Notice& n) { OnNotice(n); }, [this] { OnNoticeCleared(); });
    }
    for (auto& o : observers_) o->OnStart(*this);
    WaitSignals();
    WaitChildren();
    Dispatch(StartEvent{});
    io_.run();
    pool_.join();
    return exit_code_;
  }

 void AddObserver(std::unique_ptr<RunObserver> observer) { observers_.push_back(std::move(observer)); }

  // ---- RunControl ----
  asio::io_context& io() override { return io_; }
  const config::JobConfig& job() const override { return job_; }
  pid_t child_pid() const override { return child_pid_; }
  void RequestStop(StopReason reason, const std::string& detail) override {
    asio::post(io_, [this, reason, detail] { Dispatch(StopRequestedEvent{reason, std::nullopt, detail}); });
  }
  void RequestCheckpoint(const std::string& detail) override {
    asio::post(io_, [this, detail] { Dispatch(CheckpointRequestedEvent{detail}); });
  }

 private:
  // ---- start-up ----
  // A child of a SIGKILLed supervisor died with it (PDEATHSIG), but its group may live on.
  bool StopLeftovers() {
    const auto& child = journal_->state().child;
    if (!child) return true;
    auto pids = process::FindLeftovers(*child);
    if (pids.empty()) return true;
    Log(LogLevel::kWarning, "event=leftover_found pgid=" + std::to_string(child->pid) + " processes=" +
                                std::to_string(pids.size()) +
                                " detail=\"the previous supervisor's trainer group is still alive; stopping it before starting\"");
    // The leftover gets the usual stop signal and at most the grace window (capped: it
    // has been orphaned for a while already), then SIGKILL.
    const auto term_wait = std::min<std::chrono::milliseconds>(job_.signals.grace, std::chrono::seconds(10));
    for (int sig : {job_.signals.on_notice, SIGKILL}) {
      process::SignalGroup(child->pid, sig);
      const auto deadline = steady_clock::now() + (sig == SIGKILL ? job_.signals.kill_timeout : term_wait);
      while (steady_clock::now() < deadline && !process::FindLeftovers(*child).empty()) {
        std::this_thread::sleep_for(kGroupPoll);
      }
      if (process::FindLeftovers(*child).empty()) {
        Log(LogLevel::kInfo, "event=leftover_stopped pgid=" + std::to_string(child->pid) +
                                 " signal=" + config::SignalName(sig));
        return true;
      }
    }
    Log(LogLevel::kCritical, "event=cannot_start reason=\"leftover processes of group " + std::to_string(child->pid) +
                                 " survive SIGKILL; refusing to start a second trainer\"");
    return false;
  }

  // ---- events in ----
  void WaitSignals() {
    signals_.async_wait([this](const boost::system::error_code& ec, int signo) {
      if (ec) return;  // cancelled at shutdown
      if (signo == SIGUSR1) {
        Dispatch(CheckpointRequestedEvent{"SIGUSR1 to spotvisor"});
      } else {
        Dispatch(StopRequestedEvent{StopReason::kSignal, std::nullopt, config::SignalName(signo) + " to spotvisor"});
      }
      if (!finished_) WaitSignals();
    });
  }

  void WaitChildren() {
    children_.async_wait([this](const boost::system::error_code& ec, int) {
      if (ec) return;
      Reap();
      if (!finished_) WaitChildren();
    });
  }

  // Reaps every exited child: the trainer, and orphans adopted as subreaper.
  void Reap() {
    int status = 0;
    pid_t pid;
    while ((pid = waitpid(-1, &status, WNOHANG)) > 0) {
      if (pid == child_pid_ && !main_status_) {
        main_status_ = FromWaitStatus(status);
        Log(LogLevel::kInfo, "event=trainer_exited pid=" + std::to_string(pid) + " status=" +
                                 Quote(Describe(*main_status_)) + " uptime_ms=" +
                                 std::to_string(std::chrono::duration_cast<std::chrono::milliseconds>(
                                                    steady_clock::now() - child_started_).count()));
      }
    }
    if (main_status_ && !group_wait_) {
      group_wait_ = true;
      group_deadline_ = steady_clock::now() + job_.signals.kill_timeout;
      if (process::GroupExists(child_pid_)) {
        Log(LogLevel::kWarning, "event=group_leftovers pgid=" + std::to_string(child_pid_) +
                                    " detail=\"processes of the trainer's group outlived it: SIGKILL\"");
        process::SignalGroup(child_pid_, SIGKILL);
      }
      PollGroup();
    }
  }

  void PollGroup() {
    int status = 0;
    while (waitpid(-1, &status, WNOHANG) > 0) {
    }
    if (!process::GroupExists(child_pid_)) {
      ChildGone();
      return;
    }
    if (steady_clock::now() > group_deadline_) {
      Shutdown(Code(ExitCode::kFailed), "processes of the trainer's group " + std::to_string(child_pid_) +
                                            " survive SIGKILL; refusing to start a second trainer");
      return;
    }
    process::SignalGroup(child_pid_, SIGKILL);
    group_poll_.expires_after(kGroupPoll);
    group_poll_.async_wait([this](const boost::system::error_code& ec) {
      if (!ec) PollGroup();
    });
  }

  void ChildGone() {
    const ExitStatus status = *main_status_;
    child_pid_ = 0;
    trainer_signals_.reset();
    workers_poll_.cancel();
    main_status_.reset();
    group_wait_ = false;
    persisted_.child.reset();
    Dispatch(ChildExitedEvent{status});
  }

  // ---- preemption notices ----
  void OnNotice(const preemption::Notice& n) {
    const auto now = std::chrono::system_clock::now();
    std::optional<std::chrono::milliseconds> until_deadline;
    if (n.deadline) until_deadline = std::chrono::duration_cast<std::chrono::milliseconds>(*n.deadline - now);
    Log(LogLevel::kWarning, "event=notice provider=" + n.provider + " kind=" + n.kind + " action=" +
                                (n.action == preemption::NoticeAction::kStop ? "stop" : "checkpoint") +
                                " id=" + Quote(n.id) + " deadline=" + (n.deadline ? FormatIsoUtc(*n.deadline) : "none") +
                                " warning_ms=" + (until_deadline ? std::to_string(until_deadline->count()) : "unknown") +
                                " detail=" + Quote(n.detail));
    for (auto& o : observers_) o->OnNotice(n);
    if (n.action == preemption::NoticeAction::kCheckpoint) {
      Dispatch(CheckpointRequestedEvent{n.provider + " " + n.kind});
      return;
    }
    resume_timer_.cancel();
    notice_ = n;
    WriteNoticeFile(n);
    const NoticeGrace grace = GraceForNotice(until_deadline, job_.provider);
    if (grace.deadline_near) {
      Log(LogLevel::kWarning, "event=notice_deadline_near warning_ms=" + std::to_string(grace.window.count()) +
                                  " grace_cap=" + FormatDuration(grace.cap) +
                                  " detail=\"the deadline " + (grace.window.count() <= 0 ? "has already passed" : "is nearer than provider.safety_margin") +
                                  " (clock skew or a late notice): the trainer still gets provider.min_grace\"");
    }
    Dispatch(StopRequestedEvent{StopReason::kNotice, grace.cap, n.provider + " " + n.kind});
  }

  void OnNoticeCleared() {
    Log(LogLevel::kInfo, "event=notice_cleared resume_in=" + FormatDuration(job_.provider.resume_after));
    resume_timer_.expires_after(job_.provider.resume_after);
    resume_timer_.async_wait([this](const boost::system::error_code& ec) {
      if (ec) return;
      notice_.reset();
      Dispatch(NoticeClearedEvent{});
    });
  }

  // Drained: find (and fully validate) the checkpoint a resume would use, record it, and
  // only then tell the provider we are done (Azure acknowledgement).
  void ValidateAfterDrain() {
    asio::post(pool_, [this] {
      auto selection = selector_->SelectForResume();
      asio::post(io_, [this, selection = std::move(selection)] {
        if (finished_) return;
        if (!selection) {
          Log(LogLevel::kError, "event=drained_validation_failed error=" + Quote(selection.error().message));
        } else {
          for (auto& o : observers_) o->OnSelection(*selection);  // (the catalog logged each rejection)
          Log(LogLevel::kWarning, "event=drained newest_good=" +
                                      Quote(selection->chosen ? selection->chosen->path.string() : "none") +
                                      " step=" + (selection->chosen ? std::to_string(selection->chosen->step) : "none"));
        }
        if (watcher_ && notice_) watcher_->Acknowledge(*notice_);
      });
    });
  }

  void WriteNoticeFile(const preemption::Notice& n) {
    nlohmann::json j{{"provider", n.provider}, {"kind", n.kind},
                     {"action", n.action == preemption::NoticeAction::kStop ? "stop" : "checkpoint"},
                     {"id", n.id}, {"detail", n.detail}, {"received_at", FormatIsoUtc(std::chrono::system_clock::now())}};
    j["deadline"] = n.deadline ? nlohmann::json(FormatIsoUtc(*n.deadline)) : nlohmann::json(nullptr);
    // Atomic (the trainer never reads half of it) but not fsynced: it sits between the
    // notice and the signal, where an fsync costs tens of ms on a busy disk, and no one
    // reads it after a power cut (it is removed before a resumed trainer starts).
    if (Status s = WriteFileAtomically(NoticeFilePath(job_), j.dump(2) + "\n", Durability::kAtomicOnly); !s) {
      Log(LogLevel::kError, "event=notice_file_failed error=" + Quote(s.error().message));
    }
  }

  static std::string FormatIsoUtc(std::chrono::system_clock::time_point t) {
    const std::time_t secs = std::chrono::system_clock::to_time_t(t);
    std::tm tm{};
    gmtime_r(&secs, &tm);
    char buf[32];
    std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", &tm);
    return buf;
  }

  void Dispatch(const Event& event) {
    if (finished_) return;
    const Phase before = fsm_->phase();
    for (const Action& action : fsm_->Handle(event, steady_clock::now())) {
      std::visit([this](const auto& a) { Perform(a); }, action);
      if (finished_) break;
    }
    const Phase after = fsm_->phase();
    if (after != before) {
      for (auto& o : observers_) o->OnPhase(after);
      if (after == Phase::kDrained) ValidateAfterDrain();
    }
    SaveState();
  }

  // ---- actions out ----
  void Perform(const SelectResumeAction&) {
    asio::post(pool_, [this] {
      for (auto& o : observers_) o->BeforeSelection();
      auto selection = selector_->SelectForResume();
      asio::post(io_, [this, selection = std::move(selection)]() mutable { OnSelected(std::move(selection)); });
    });
  }

  void OnSelected(Result<checkpoint::Selection> selection) {
    if (!selection) {
      Shutdown(Code(ExitCode::kFailed), "cannot choose a checkpoint to resume from: " + selection.error().message +
                                            " (not starting from scratch while checkpoints may exist)");
      return;
    }
    for (auto& o : observers_) o->OnSelection(*selection);  // (the catalog logged each rejection)
    Dispatch(ResumeSelectedEvent{selection->chosen});
  }

  void Perform(const SpawnAction& a) {
    auto spec = BuildSpawnSpec(job_, a);
    if (!spec) {
      asio::post(io_, [this, message = spec.error().message] { Dispatch(SpawnFailedEvent{message}); });
      return;
    }
    if (job_.checkpoints.dir) {
      std::error_code ec;
      std::filesystem::create_directories(*job_.checkpoints.dir, ec);
    }
    std::error_code stale;
    std::filesystem::remove(NoticeFilePath(job_), stale);  // a resumed trainer starts without a notice
    auto child = process::Spawn(*spec);
    if (!child) {
      asio::post(io_, [this, message = child.error().message] { Dispatch(SpawnFailedEvent{message}); });
      return;
    }
    child_pid_ = child->pid;
    trainer_signals_.emplace(child_pid_);
    if (child->stdout_fd >= 0) {
      std::erase_if(relays_, [](const auto& r) { return r->done(); });
      relays_.push_back(std::make_unique<process::OutputRelay>(
          io_, child->stdout_fd, child->stderr_fd, [this](std::string_view line) {
            for (auto& o : observers_) o->OnTrainerLine(line);
          }));
    }
    child_started_ = steady_clock::now();
    persisted_.child = process::Identify(child_pid_);
    current_ = state::AttemptRecord{};
    current_.attempt = a.attempt;
    current_.started_ms = state::UnixMillisNow();
    current_.pid = child_pid_;
    if (a.resume) {
      current_.resume_from = a.resume->path.string();
      current_.resume_step = a.resume->step;
    }
    std::string argv;
    for (const auto& arg : spec->argv) argv += (argv.empty() ? "" : " ") + arg;
    Log(LogLevel::kInfo, "event=trainer_started attempt=" + std::to_string(a.attempt) + " pid=" +
                             std::to_string(child_pid_) + " resume=" +
                             Quote(a.resume ? a.resume->path.string() : "none") + " argv=" + Quote(argv) +
                             " signal_target=" + config::ToString(job_.signals.Recipients()) +
                             " signal_target_why=" + Quote(job_.signals.target_why));
    for (auto& o : observers_) o->OnAttemptStarted(a.attempt, child_pid_, a.resume);
  }

  void Perform(const SignalAction& a) {
    if (!trainer_signals_) return;
    const std::size_t reached = trainer_signals_->Send(a.signo, a.to, a.only_to_handlers);
    const char* none = a.to == config::SignalTarget::kWorkers ? " result=\"the launcher has no worker now\""
                                                              : " result=\"no such process\"";
    Log(reached > 0 ? LogLevel::kInfo : LogLevel::kWarning,
        "event=signal_sent signal=" + config::SignalName(a.signo) + " target=" + config::ToString(a.to) +
            " pid=" + std::to_string(child_pid_) + " processes=" + std::to_string(reached) +
            (a.to == config::SignalTarget::kWorkers ? " workers=" + trainer_signals_->LastPids() : "") +
            (trainer_signals_->LastSkipped() > 0
                 ? " skipped=" + std::to_string(trainer_signals_->LastSkipped()) + " skipped_why=\"no handler for it yet (still starting)\""
                 : "") +
            (reached > 0 ? "" : none));
    if (reached > 0) {
      for (auto& o : observers_) o->OnSignalSent(a.signo, a.to);
    }
  }

  void Perform(const HoldLaunchersAction&) {
    if (!trainer_signals_) return;
    const std::size_t held = trainer_signals_->HoldLaunchers();
    Log(LogLevel::kInfo, "event=signal_sent signal=SIGSTOP target=launcher pid=" + std::to_string(child_pid_) +
                             " processes=" + std::to_string(held) +
                             " detail=\"the launcher waits, paused, while its workers stop: it neither restarts nor kills them\"");
  }

  void Perform(const ReleaseLaunchersAction& a) {
    if (!trainer_signals_) return;
    const std::size_t released = trainer_signals_->ReleaseLaunchers(a.signo);
    Log(LogLevel::kInfo, "event=signal_sent signal=" + config::SignalName(a.signo) + "+SIGCONT target=launcher pid=" +
                             std::to_string(child_pid_) + " processes=" + std::to_string(released));
  }

  void Perform(const WatchWorkersAction&) {
    workers_poll_.expires_after(kWorkersPoll);
    workers_poll_.async_wait([this](const boost::system::error_code& ec) {
      if (ec || !trainer_signals_ || fsm_->phase() != Phase::kStopping) return;
      if (trainer_signals_->WorkersGone()) {
        Dispatch(WorkersGoneEvent{});
      } else {
        Perform(WatchWorkersAction{});
      }
    });
  }

  void Perform(const KillGroupAction&) {
    if (!trainer_signals_) return;
    const std::size_t n = trainer_signals_->KillGroup();
    // What each process was doing when it would not stop: the first clue to a hung save.
    Log(LogLevel::kWarning, "event=signal_sent signal=SIGKILL target=group pid=" + std::to_string(child_pid_) +
                                " processes=" + std::to_string(n) +
                                (n > 0 ? " states=" + Quote(trainer_signals_->KilledStates()) : ""));
  }

  void Perform(const ArmTimerAction& a) {
    auto& timer = timers_.at(a.kind);
    timer.expires_at(a.at);
    timer.async_wait([this, kind = a.kind](const boost::system::error_code& ec) {
      if (!ec) Dispatch(TimerFiredEvent{kind});
    });
  }

  void Perform(const CancelTimerAction& a) { timers_.at(a.kind).cancel(); }

  void Perform(const AttemptEndedAction& a) {
    current_.ended_ms = state::UnixMillisNow();
    if (a.status.signal != 0) {
      current_.signal = a.status.signal;
    } else {
      current_.exit_code = a.status.code;
    }
    current_.outcome = std::string(ToString(a.outcome));
    current_.next = a.next;
    Log(a.outcome == Outcome::kDone ? LogLevel::kInfo : LogLevel::kWarning,
        "event=attempt_ended attempt=" + std::to_string(current_.attempt) + " outcome=" + current_.outcome +
            " status=" + Quote(Describe(a.status)) + " next=" + Quote(a.next));
    if (Status s = journal_->AppendAttempt(current_); !s) JournalTrouble(s.error().message);
    for (auto& o : observers_) o->OnAttemptEnded(current_);
  }

  void Perform(const LogAction& a) { Log(a.level, a.text); }

  void Perform(const ExitAction& a) { Shutdown(Code(a.code), a.message); }

  void Shutdown(int code, const std::string& message) {
    if (finished_) return;
    finished_ = true;
    exit_code_ = code;
    persisted_.last_exit_message = message;
    const LogLevel level = code == 0 || code == Code(ExitCode::kStopped) ? LogLevel::kInfo : LogLevel::kError;
    Log(level, "event=exit code=" + std::to_string(code) + " message=" + Quote(message));
    for (auto& [kind, timer] : timers_) timer.cancel();
    group_poll_.cancel();
    workers_poll_.cancel();
    resume_timer_.cancel();
    if (watcher_) watcher_->Stop();
    signals_.cancel();
    children_.cancel();
    for (auto& relay : relays_) relay->Drain(kOutputDrain);  // the group is gone: EOF is near
    SaveState(/*force=*/true);
    for (auto& o : observers_) o->OnExit(code, message);
  }

  void SaveState(bool force = false) {
    if (!journal_ || !fsm_) return;
    state::PersistedState s = persisted_;
    s.job = job_.job.name;
    StoreCounters(fsm_->counters(), state::UnixMillisNow(), steady_clock::now(), s);
    s.phase = PhaseName(fsm_->phase());
    if (!force && SameForTheJournal(s, journal_->state())) return;
    // Mid-run saves are atomic but not fsynced (attempts.jsonl is the durable record and a
    // power cut leaves no process to find); the last one is durable.
    const std::size_t held = journal_->unwritten_attempts();
    Status st = journal_->Save(s, force ? Durability::kDurable : Durability::kAtomicOnly);
    if (st) st = journal_->FlushAttempts();  // attempt lines a full or read-only dir refused
    if (!st) {
      JournalTrouble(st.error().message);
    } else if (journal_trouble_) {
      journal_trouble_ = false;
      Log(LogLevel::kInfo, "event=state_writable_again dir=" + Quote(job_.telemetry.state_dir.string()) +
                               " attempts_appended=" + std::to_string(held));
    }
  }

  // Said once per change of condition; supervision goes on without a journal.
  void JournalTrouble(const std::string& message) {
    if (journal_trouble_) return;
    journal_trouble_ = true;
    Log(LogLevel::kError, "event=state_write_failed error=" + Quote(message) +
                              " detail=\"supervising on; the journal will be rewritten when the state dir is writable\"");
  }

  const config::JobConfig& job_;                          // not owned
  std::unique_ptr<checkpoint::ResumeSelector> selector_;  // used on pool_ only
  asio::io_context io_;                                   // the one event loop
  asio::thread_pool pool_{1};                             // checkpoint selection
  asio::signal_set signals_;                              // stop / checkpoint requests
  asio::signal_set children_;                             // SIGCHLD
  std::map<TimerKind, asio::steady_timer> timers_;        // armed by the Fsm
  asio::steady_timer group_poll_;                         // waiting for the group to empty
  asio::steady_timer workers_poll_;                       // waiting for a launcher's workers to stop
  asio::steady_timer resume_timer_;                       // a cleared notice, confirmed
  std::unique_ptr<preemption::Watcher> watcher_;          // null for provider none
  std::optional<preemption::Notice> notice_;              // the stop notice being handled
  std::vector<std::unique_ptr<RunObserver>> observers_;   // see run_observer.hpp
  std::vector<std::unique_ptr<process::OutputRelay>> relays_;  // trainers' output, until EOF
  std::optional<state::JobLock> lock_;                    // held for our whole life
  std::optional<state::Journal> journal_;                 // the job's memory
  std::optional<Fsm> fsm_;                                // the policy
  state::PersistedState persisted_;                       // driver-owned parts of the state
  state::AttemptRecord current_;                          // the attempt in progress
  pid_t child_pid_ = 0;                                   // also its pgid; 0 = none
  std::optional<TrainerSignals> trainer_signals_;         // to child_pid_'s group, main or workers
  steady_clock::time_point child_started_{};              // for uptime
  std::optional<ExitStatus> main_status_;                 // main child reaped, group maybe not
  bool group_wait_ = false;                               // polling for the group to empty
  steady_clock::time_point group_deadline_{};             // give up waiting then
  bool journal_trouble_ = false;                          // state dir not writable
  bool finished_ = false;                                 // Exit performed
  int exit_code_ = Code(ExitCode::kFailed);               // what Run returns
};

Driver::Driver(const config::JobConfig& job, std::unique_ptr<checkpoint::ResumeSelector> selector)
    : impl_(std::make_unique<Impl>(job, std::move(selector))) {}
Driver::~Driver() = default;
void Driver::AddObserver(std::unique_ptr<RunObserver> observer) { impl_->AddObserver(std::move(observer)); }
int Driver::Run() { return impl_->Run(); }

}  // namespace spotvisor::supervisor

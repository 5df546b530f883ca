// The telemetry observer: one RunObserver that turns what happens in a run into the run
// record (run_record.hpp), the metrics endpoint, systemd's status (systemd_status.hpp), the
// budget check (the decision is supervisor/budget.hpp's), the hooks (run_hooks.hpp), GPU
// samples (gpu_sampler.hpp), instance facts, each attempt's first progress
// (progress_watch.hpp), the notices settled with what they saved or lost, the mirror's
// uploads (mirror_uploads.hpp) and, at the end, the report (through the writer passed in).
// Time is the run's clock (RunControl::clock()); the record, the hooks, the progress watch
// and the sampler are made in OnStart, when that clock is known. io thread only (NVML runs on
// the sampler's thread, the mirror's callback on its upload thread). Invariant: after OnExit
// nothing of ours keeps the io_context busy except a running on_finish hook (and the
// watchdog petting that covers it).
#include "spotvisor/telemetry/telemetry_observer.hpp"

#include <boost/asio/io_context.hpp>
#include <boost/asio/post.hpp>
#include <cstdio>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <utility>

#include "gpu_sampler.hpp"
#include "mirror_uploads.hpp"
#include "progress_watch.hpp"
#include "run_hooks.hpp"
#include "run_record.hpp"
#include "spotvisor/checkpoint_watch/checkpoint_watcher.hpp"
#include "spotvisor/log/log.hpp"
#include "spotvisor/mirror/mirror_observer.hpp"
#include "spotvisor/preemption/instance_facts.hpp"
#include "spotvisor/supervisor/budget.hpp"
#include "spotvisor/supervisor/outcome.hpp"
#include "spotvisor/telemetry/metrics_server.hpp"
#include "spotvisor/telemetry/notice_saves.hpp"
#include "spotvisor/telemetry/run_metrics.hpp"
#include "spotvisor/util/clock.hpp"
#include "spotvisor/util/secret_file.hpp"
#include "systemd_status.hpp"

namespace spotvisor::telemetry {

using log::Log;
using log::LogLevel;
using log::Quote;
namespace {

namespace asio = boost::asio;
using supervisor::Phase;

constexpr auto kStopMargin = std::chrono::seconds(30);  // after the group is gone: report, hooks, exit
constexpr auto kHeartbeat = std::chrono::seconds(30);   // run.json refresh: billed time survives a SIGKILL

std::string Seconds3(std::int64_t ms) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.3f", static_cast<double>(ms) / 1000.0);
  return buf;
}

class TelemetryObserver final : public supervisor::RunObserver {
 public:
  // `job`, `watcher` (null: no checkpoints.dir) and `mirror` (null: no mirror) outlive the
  // observer; both are subscribed to here.
  TelemetryObserver(const config::JobConfig& job, checkpoint_watch::CheckpointWatcher* watcher,
                    mirror::MirrorObserver* mirror, std::optional<MetricsEndpoint> endpoint,
                    std::optional<SdNotifier> notifier, ReportWriter write_report)
      : job_(job),
        endpoint_(std::move(endpoint)),
        systemd_(std::move(notifier)),
        write_report_(std::move(write_report)) {
    Subscribe(watcher);
    if (mirror) mirror_.emplace(*mirror, [this] { TakeMirrored(); });
  }

  void OnStart(supervisor::RunControl& control) override;
  void OnSelection(const checkpoint::Selection& selection) override;
  void OnAttemptStarted(const supervisor::SpawnAction& start, pid_t pid) override;
  void OnAttemptEnded(const state::AttemptRecord& record) override;
  void OnNotice(const preemption::Notice& n) override;
  void OnSignalSent(int signo, config::SignalTarget to) override;
  void OnTrainerLine(std::string_view line) override;
  void OnPhase(supervisor::Phase phase) override;
  void OnExit(int code, const std::string& message) override;

 private:
  // ---- start ----
  void AskInstanceFacts(asio::io_context& io);
  void StartMetrics(asio::io_context& io);
  void StartTimers(asio::io_context& io);
  void Every(Timer& timer, Duration period, std::function<void()> what);
  // ---- checkpoints, budget ----
  void Subscribe(checkpoint_watch::CheckpointWatcher* watcher);  // new verdicts go to OnCheckpoint
  void OnCheckpoint(const checkpoint_watch::CheckpointVerdict& v);
  void CheckBudget();
  void LogBudgetUnknowns();
  // ---- first progress, notices to saves, waiting, the mirror ----
  void FirstProgress(std::int64_t ms);                   // the current attempt showed progress
  void Settle(const std::vector<std::size_t>& notices);  // logs them; saves
  // A notice the trainer could not save on: the newest good checkpoint and the steps lost.
  void NameWhatWasLost(NoticeRecord& n) const;
  void TrackWaiting(supervisor::Phase phase);
  void TakeMirrored();  // what the mirror's uploads left waiting, into the ledger
  // ---- output ----
  std::optional<std::filesystem::path> WriteRunReport();
  std::string RenderMetrics() const;
  void UpdateStatus();
  std::int64_t NowMs() const { return UnixMillis(clock_->WallNow()); }
  static double Seconds(SteadyTime::duration d) { return std::chrono::duration<double>(d).count(); }

  const config::JobConfig& job_;                 // outlives us
  std::optional<MetricsEndpoint> endpoint_;      // metrics on, with its token
  SystemdStatus systemd_;                        // sd_notify and the watchdog
  ReportWriter write_report_;                    // the report at OnExit (empty: none)
  supervisor::RunControl* control_ = nullptr;    // from OnStart
  Clock* clock_ = nullptr;                       // the run's; from OnStart
  std::optional<RunRecord> record_;              // run.json and the attempts; from OnStart
  std::optional<RunHooks> hooks_;                // the job's hooks; from OnStart
  std::optional<ProgressWatch> progress_;        // each attempt's first progress; from OnStart
  std::optional<state::AttemptRecord> current_;  // the attempt in progress
  supervisor::Phase phase_ = supervisor::Phase::kIdle;
  SteadyTime trainer_started_{};                          // the current trainer's start
  std::optional<SteadyTime> notice_at_, stop_signal_at_;  // the last notice; the stop signal
  std::optional<std::size_t> awaiting_signal_;            // notice index without signal yet
  std::optional<double> last_notice_to_signal_, last_grace_used_;
  std::map<std::pair<std::string, std::string>, int> hook_runs_;  // (hook, outcome) -> runs
  std::unique_ptr<MetricsServer> metrics_;
  std::unique_ptr<preemption::InstanceFactsQuery> facts_;  // until it answers or we exit
  std::unique_ptr<Timer> heartbeat_, budget_timer_;        // run.json refresh; the budget check
  // The newest good checkpoint known (the selection's choice, then each new good one): name, step.
  std::optional<std::pair<std::string, std::uint64_t>> newest_good_;
  std::optional<std::int64_t> waiting_since_;  // multi-node: joining or finishing since
  int group_world_ = 1;
  std::optional<GpuSampler> gpu_;  // NVML, on its own thread
  bool budget_stopped_ = false, exited_ = false;
  // With a mirror. Last, so destroyed first: no upload reaches a half-destroyed observer.
  std::optional<MirrorUploads> mirror_;
};

// ---- the run's events ----
void TelemetryObserver::OnStart(supervisor::RunControl& control) {
  control_ = &control;
  clock_ = &control.clock();
  auto& io = control.io();
  if (mirror_) mirror_->Attach(io, control.clock());
  record_.emplace(job_, *clock_);
  hooks_.emplace(job_, *clock_, [this](const std::string& name, const hooks::HookResult& r, std::int64_t started_ms) {
    record_->ledger().AddHook({name, r.outcome, r.message, started_ms, r.duration.count()});
    ++hook_runs_[{name, r.outcome}];
    record_->Save();
  });
  record_->Load();
  progress_.emplace(job_.health, *clock_, io, [this](std::int64_t ms) { FirstProgress(ms); });
  record_->ledger().first_progress_from = progress_->source();
  hooks_->RunBeforeStart(record_->last_attempt(), control.children());
  hooks_->Start(io, control.children());
  StartMetrics(io);
  StartTimers(io);
  gpu_.emplace(io, *clock_, job_.telemetry.gpu_interval, record_->ledger().gpu, [this] { record_->Save(); });
  gpu_->Start();
  AskInstanceFacts(io);
  systemd_.Notify("STATUS=starting " + job_.job.name);
  LogBudgetUnknowns();
}

void TelemetryObserver::OnSelection(const checkpoint::Selection& selection) {
  auto& ledger = record_->ledger();
  if (selection.chosen) newest_good_.emplace(selection.chosen->path.filename().string(), selection.chosen->step);
  for (const auto& rejected : selection.rejected) {
    // A fenced one is not corrupt (its bytes may be fine); event=checkpoint_fenced says why.
    if (rejected.fenced) continue;
    const std::string name = rejected.path.filename().string();
    bool seen = false;
    for (const auto& c : ledger.checkpoints) seen = seen || (c.name == name && !c.good);
    if (seen) continue;
    CheckpointRecord r;
    r.name = name;
    r.good = false;
    r.reason = rejected.reason;
    r.attempt = current_ ? current_->attempt : record_->last_attempt();
    r.seen_ms = NowMs();
    ledger.AddCheckpoint(r);
  }
  record_->Save();
}

void TelemetryObserver::OnAttemptStarted(const supervisor::SpawnAction& start, pid_t pid) {
  state::AttemptRecord r;
  r.attempt = start.attempt;
  r.pid = pid;
  r.started_ms = NowMs();
  if (start.resume) r.resume_from = start.resume->path.string(), r.resume_step = start.resume->step;
  current_ = r;
  hooks_->SetPlace(start.place);
  group_world_ = start.place.world;
  record_->AttemptStarted(start.attempt);
  Settle(SettleOpen(record_->ledger(), start.attempt));  // earlier attempts' notices: no save comes now
  // After the settling: the notices of the attempt before were named with its last step.
  progress_->AttemptStarted(r.started_ms);
  trainer_started_ = clock_->Now();
  stop_signal_at_.reset();
  systemd_.Ready();
  UpdateStatus();
}

void TelemetryObserver::OnAttemptEnded(const state::AttemptRecord& record) {
  record_->AttemptEnded(record);
  current_.reset();
  progress_->AttemptEnded();
  if (stop_signal_at_) last_grace_used_ = Seconds(clock_->Now() - *stop_signal_at_);
  stop_signal_at_.reset();
  UpdateStatus();
}

void TelemetryObserver::OnNotice(const preemption::Notice& n) {
  NoticeRecord r;
  r.received_ms = NowMs();
  r.provider = n.provider;
  r.kind = n.kind;
  r.action = n.action == preemption::NoticeAction::kStop ? "stop" : "checkpoint";
  if (n.deadline) {
    r.deadline_ms = std::chrono::duration_cast<std::chrono::milliseconds>(n.deadline->time_since_epoch()).count();
  }
  r.attempt = current_ ? current_->attempt : record_->last_attempt();
  if (mirror_) {
    TakeMirrored();  // the planner's newest verdict
    r.mirror = true;
    if (const auto& plan = mirror_->durability())
      r.predicted_durable_ms = (plan->save.value_or(Duration::zero()) + plan->upload).count();
  }
  auto& notices = record_->ledger().notices;
  notices.push_back(r);
  awaiting_signal_ = notices.size() - 1;
  notice_at_ = clock_->Now();
  // The driver signals the trainer in this same handler, after the observers: the record
  // and the hook go to the back of the io queue instead of delaying that signal.
  asio::post(control_->io(), [this, provider = n.provider, kind = n.kind] {
    if (exited_) return;
    record_->Save();
    hooks_->Run("on_notice", job_.hooks.on_notice, record_->last_attempt(),
                {{"provider", provider}, {"notice_kind", kind}});
  });
}

void TelemetryObserver::OnSignalSent(int signo, config::SignalTarget) {
  const bool stop_signal = signo == job_.signals.on_notice;
  if (awaiting_signal_ && notice_at_) {
    record_->ledger().notices[*awaiting_signal_].signal_ms = NowMs();
    last_notice_to_signal_ = Seconds(clock_->Now() - *notice_at_);
    awaiting_signal_.reset();
    record_->Save();
  }
  if (stop_signal && !stop_signal_at_) stop_signal_at_ = clock_->Now();
}

void TelemetryObserver::OnTrainerLine(std::string_view line) {
  if (progress_) progress_->Line(line);
}

void TelemetryObserver::OnPhase(Phase phase) {
  phase_ = phase;
  TrackWaiting(phase);
  UpdateStatus();
  // A stop may take the whole grace: systemd must not SIGKILL the trainer mid-save at the
  // unit's TimeoutStopSec. EXTEND_TIMEOUT_USEC (systemd >= 236) moves that deadline out to
  // the grace + kill timeout + a margin for the report, counted from now.
  if (phase == Phase::kStopping) {
    const auto stop = job_.signals.grace + job_.signals.kill_timeout + kStopMargin;
    systemd_.Notify("EXTEND_TIMEOUT_USEC=" +
                    std::to_string(std::chrono::duration_cast<std::chrono::microseconds>(stop).count()));
  }
}

void TelemetryObserver::OnExit(int code, const std::string& message) {
  TakeMirrored();  // the mirror's OnExit came first: what reached it by its deadline is in the report
  exited_ = true;
  if (mirror_) mirror_->Detach();
  if (!record_) return;  // never started
  auto& sessions = record_->ledger().sessions;
  if (!sessions.empty()) {
    auto& s = sessions.back();
    s.ended_ms = s.last_seen_ms = NowMs();
    s.exit_code = code;
    s.exit_message = message;
  }
  TrackWaiting(Phase::kFinished);
  Settle(SettleOpen(record_->ledger(), std::nullopt));
  if (mirror_) mirror_->SettleAll(record_->ledger());
  record_->Save();
  const auto report_path = WriteRunReport();
  systemd_.Notify("STOPPING=1\nSTATUS=exit " + std::to_string(code) + ": " + message);
  if (metrics_) metrics_->Stop();
  facts_.reset();
  for (auto* t : {&heartbeat_, &budget_timer_}) t->reset();
  progress_->Stop();
  if (gpu_) gpu_->Stop();
  using supervisor::ExitCode;
  const bool finish = code == supervisor::Code(ExitCode::kDone) || code == supervisor::Code(ExitCode::kFailed) ||
                      code == supervisor::Code(ExitCode::kBudget);
  if (finish && !job_.hooks.on_finish.command.empty()) {
    hooks_->Run("on_finish", job_.hooks.on_finish, record_->last_attempt(),
                {{"exit_code", std::to_string(code)}, {"report", report_path ? report_path->string() : ""}},
                [this] { systemd_.StopWatchdog(); });
  } else {
    systemd_.StopWatchdog();
  }
}

// ---- start ----
void TelemetryObserver::AskInstanceFacts(asio::io_context& io) {
  facts_ = preemption::InstanceFactsQuery::Make(io, job_.provider);
  if (!facts_) return;
  facts_->Start([this](preemption::InstanceFacts f) { record_->AddInstanceFacts(f); });
}

void TelemetryObserver::StartMetrics(asio::io_context& io) {
  if (!endpoint_) return;
  metrics_ = std::make_unique<MetricsServer>(io, *endpoint_, [this] { return RenderMetrics(); });
  auto bound = metrics_->Start();
  if (!bound) {
    Log(LogLevel::kError, "event=metrics_unavailable error=" + Quote(bound.error().message) +
                              " detail=\"supervising on without /metrics\"");
    metrics_.reset();
    return;
  }
  Log(LogLevel::kInfo,
      "event=metrics_listening address=" + *bound + " auth=" + (endpoint_->token.empty() ? "none" : "bearer"));
}

void TelemetryObserver::StartTimers(asio::io_context& io) {
  heartbeat_ = clock_->MakeTimer(io);
  Every(*heartbeat_, kHeartbeat, [this] {
    record_->ledger().sessions.back().last_seen_ms = NowMs();
    record_->Save();
  });
  if (job_.cost.configured && job_.cost.budget > 0) {
    budget_timer_ = clock_->MakeTimer(io);
    Every(*budget_timer_, job_.cost.check_interval, [this] { CheckBudget(); });
  }
  systemd_.StartWatchdog(io, *clock_);
}

// Runs `what` every `period` until the timer is destroyed or cancelled.
void TelemetryObserver::Every(Timer& timer, Duration period, std::function<void()> what) {
  timer.After(period, [this, &timer, period, what = std::move(what)]() mutable {
    what();
    Every(timer, period, std::move(what));
  });
}

// ---- checkpoints, budget ----
void TelemetryObserver::Subscribe(checkpoint_watch::CheckpointWatcher* watcher) {
  if (!watcher) return;
  watcher->Subscribe([this](const std::vector<checkpoint_watch::CheckpointVerdict>& verdicts) {
    for (const auto& v : verdicts) OnCheckpoint(v);
  });
}

void TelemetryObserver::OnCheckpoint(const checkpoint_watch::CheckpointVerdict& v) {
  if (exited_ || !record_) return;
  if (!v.good && v.shape.bytes == 0) {
    // An empty directory (or file) the trainer made and has not written into yet: not
    // corrupt, nothing to record; it is judged again when it changes.
    Log(LogLevel::kDebug, "event=checkpoint_pending name=" + Quote(v.name) + " reason=\"empty: not written yet\"");
    return;
  }
  CheckpointRecord r;
  r.name = v.name;
  r.step = v.step;
  r.bytes = v.shape.bytes;
  r.mtime_ms = v.shape.mtime_ms;
  if (v.shape.birth_ms && v.shape.mtime_ms >= *v.shape.birth_ms) r.write_ms = v.shape.mtime_ms - *v.shape.birth_ms;
  r.good = v.good;
  r.reason = v.reason;
  r.seen_ms = std::chrono::duration_cast<std::chrono::milliseconds>(v.detected_at.time_since_epoch()).count();
  r.attempt = current_ ? current_->attempt : record_->last_attempt();
  if (r.good && (!newest_good_ || r.step >= newest_good_->second)) newest_good_.emplace(r.name, r.step);
  record_->ledger().AddCheckpoint(r);
  record_->Save();
  Settle(MatchCheckpoint(record_->ledger(), r));
  Log(r.good ? LogLevel::kInfo : LogLevel::kWarning,
      "event=checkpoint_seen name=" + Quote(r.name) + " step=" + std::to_string(r.step) +
          " verdict=" + (r.good ? "good" : "corrupt") + " bytes=" + std::to_string(r.bytes) +
          " write_ms=" + (r.write_ms ? std::to_string(*r.write_ms) : "unknown") + " reason=" + Quote(r.reason));
  UpdateStatus();
  if (r.good) {
    hooks_->Run("on_checkpoint", job_.hooks.on_checkpoint, record_->last_attempt(),
                {{"checkpoint", v.path.string()}, {"step", std::to_string(r.step)}});
  }
}

void TelemetryObserver::CheckBudget() {
  if (budget_stopped_) return;
  auto& ledger = record_->ledger();
  const auto d =
      supervisor::DecideBudget(record_->Summary(current_).cost, job_.cost, ledger.budget_warned_ms.has_value());
  if (d.warn) {
    ledger.budget_warned_ms = NowMs();
    Log(LogLevel::kWarning, "event=budget_warning estimate=" + Quote(d.estimate) + " budget=" + d.budget +
                                " warn_fraction=" + std::to_string(job_.cost.warn_fraction));
    record_->Save();
  }
  if (!d.stop) return;
  budget_stopped_ = true;
  ledger.budget_exhausted_ms = NowMs();
  record_->Save();
  Log(LogLevel::kError, "event=budget_exhausted estimate=" + Quote(d.estimate) + " budget=" + d.budget +
                            " action=\"checkpoint and stop\"");
  control_->RequestStop(supervisor::StopReason::kBudget, d.stop_detail);
}

void TelemetryObserver::LogBudgetUnknowns() {
  if (!job_.cost.configured) return;
  const auto s = record_->Summary(current_);
  if (s.cost.unknown.empty()) return;
  std::string names;
  for (const auto& n : s.cost.unknown) names += (names.empty() ? "" : ",") + n;
  Log(job_.cost.budget > 0 ? LogLevel::kWarning : LogLevel::kInfo,
      "event=cost_unknown components=" + Quote(names) +
          " detail=\"no price: listed as unknown in the report, not counted as zero; a budget counts only priced and "
          "ranged components\"");
}

// ---- first progress, notices to saves, waiting, the mirror ----
void TelemetryObserver::FirstProgress(std::int64_t ms) {
  if (!current_) return;
  record_->ledger().AddFirstProgress(current_->attempt, ms);
  Log(LogLevel::kInfo, "event=first_progress attempt=" + std::to_string(current_->attempt) + " from=" +
                           record_->ledger().first_progress_from + " after_s=" + Seconds3(ms - current_->started_ms));
  record_->Save();
}

// Never "checkpoint=none" when a good one exists: a resume starts from the newest good
// checkpoint, and the steps the trainer had reached beyond it are the ones lost.
void TelemetryObserver::NameWhatWasLost(NoticeRecord& n) const {
  if (n.validated_ms || !n.checkpoint.empty() || !newest_good_) return;
  n.checkpoint = newest_good_->first;
  n.step = newest_good_->second;
  const auto last_step = progress_->last_step();
  if (last_step && *last_step >= newest_good_->second) n.steps_lost = *last_step - newest_good_->second;
}

void TelemetryObserver::Settle(const std::vector<std::size_t>& settled) {
  if (settled.empty()) return;
  const auto summary = record_->Summary(current_);
  auto& notices = record_->ledger().notices;
  for (const std::size_t i : settled) {
    auto& n = notices[i];
    NameWhatWasLost(n);
    std::optional<double> steps_lost;
    for (const auto& a : summary.attempts) {
      if (a.record.attempt == n.attempt) steps_lost = a.steps_lost_estimated;
    }
    if (n.steps_lost) steps_lost = static_cast<double>(*n.steps_lost);  // measured beats estimated
    Log(n.outcome == "saved" || n.outcome == "no-deadline" ? LogLevel::kInfo : LogLevel::kWarning,
        NoticeEventLine(n, steps_lost));
  }
  record_->Save();
}

void TelemetryObserver::TrackWaiting(supervisor::Phase phase) {
  if (job_.coordination.nodes <= 1) return;
  // A spare (or a newcomer held until a shrunken group stops) waits for the group too.
  const bool waiting = phase == supervisor::Phase::kJoining || phase == supervisor::Phase::kFinishing ||
                       phase == supervisor::Phase::kSpare;
  if (waiting && !waiting_since_) waiting_since_ = NowMs();
  if (!waiting && waiting_since_) {
    record_->ledger().AddWaiting({*waiting_since_, NowMs()});
    waiting_since_.reset();
    record_->Save();
  }
}

void TelemetryObserver::TakeMirrored() {
  if (exited_ || !record_ || !mirror_) return;
  if (mirror_->Take(record_->ledger())) record_->Save();
}

// ---- output ----
std::optional<std::filesystem::path> TelemetryObserver::WriteRunReport() {
  if (!write_report_) return std::nullopt;
  return write_report_(job_, NowMs());
}

std::string TelemetryObserver::RenderMetrics() const {
  const auto summary = record_->Summary(current_);
  LiveView v;
  v.ledger = &record_->ledger();
  v.summary = &summary;
  v.phase = PhaseName(phase_);
  if (current_) v.trainer_uptime_seconds = Seconds(clock_->Now() - trainer_started_);
  v.last_notice_to_signal_seconds = last_notice_to_signal_;
  v.last_grace_used_seconds = last_grace_used_;
  v.gpu_sampled = gpu_ && gpu_->sampled();
  if (gpu_) v.gpus = gpu_->samples();
  v.hook_runs = hook_runs_;
  v.now_ms = NowMs();
  // The group agreed on `world` members at the current start; between starts this observer
  // does not see etcd: -1 (unknown) on a multi-node job.
  v.group_nodes = job_.coordination.nodes;
  v.group_members = job_.coordination.nodes <= 1 ? 1 : current_ ? group_world_ : -1;
  if (mirror_) {
    v.mirrored = true;
    v.newest_durable = mirror_->newest_durable();
    v.durability = mirror_->durability();
    // The newest good checkpoint, while the mirror does not hold it yet.
    const CheckpointRecord* newest = nullptr;
    for (const auto& c : record_->ledger().checkpoints) {
      if (c.good && (!newest || c.step > newest->step)) newest = &c;
    }
    const auto& durable = mirror_->newest_durable();
    if (newest && (!durable || newest->step > durable->first)) v.bytes_not_durable = newest->bytes;
  }
  return RenderRunMetrics(v);
}

void TelemetryObserver::UpdateStatus() {
  const auto s = record_->Summary(current_);
  std::string status = "STATUS=" + std::string(PhaseName(phase_));
  if (current_) status += ", attempt " + std::to_string(current_->attempt);
  status += s.final_step ? ", newest good checkpoint step " + std::to_string(*s.final_step) : ", no checkpoint yet";
  systemd_.Notify(status);
}

}  // namespace

Result<std::vector<std::unique_ptr<supervisor::RunObserver>>> MakeTelemetryObservers(
    const config::JobConfig& job, checkpoint_watch::CheckpointWatcher* watcher, mirror::MirrorObserver* mirror,
    ReportWriter write_report) {
  std::optional<MetricsEndpoint> endpoint;
  if (!job.telemetry.metrics.listen.empty()) {
    auto checked = CheckMetricsConfig(job.telemetry.metrics);
    if (!checked) return checked.error();
    endpoint = std::move(*checked);
  } else if (job.telemetry.metrics.token_file) {
    if (auto token = ReadSecretFile(*job.telemetry.metrics.token_file, "metrics token"); !token) {
      return Error{"telemetry.metrics.token_file: " + token.error().message};
    }
  }
  std::vector<std::unique_ptr<supervisor::RunObserver>> out;
  out.push_back(std::make_unique<TelemetryObserver>(job, watcher, mirror, std::move(endpoint),
                                                    SdNotifier::FromEnvironment(), std::move(write_report)));
  return out;
}

}  // namespace spotvisor::telemetry

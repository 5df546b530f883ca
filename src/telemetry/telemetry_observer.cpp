// The telemetry observer: one RunObserver that turns what happens in a run into the run
// record (run_record.hpp), the metrics endpoint, systemd's status (systemd_status.hpp),
// the budget check (the decision is supervisor/budget.hpp's), the hooks (run_hooks.hpp),
// GPU samples (gpu_sampler.hpp), instance facts and the report. This file: the run's events
// as they come; telemetry_outputs.cpp: what they start and write. io thread only. Invariant:
// after OnExit nothing of ours keeps the io_context busy except a running on_finish hook
// (and the watchdog petting that covers it).
#include "spotvisor/telemetry/telemetry_observer.hpp"

#include <boost/asio/post.hpp>

#include "spotvisor/supervisor/outcome.hpp"
#include "spotvisor/telemetry/notice_saves.hpp"
#include "spotvisor/util/secret_file.hpp"
#include "telemetry_observer_impl.hpp"

namespace spotvisor::telemetry {
namespace {

namespace asio = boost::asio;
using supervisor::Phase;

constexpr auto kStopMargin = std::chrono::seconds(30);  // after the group is gone: report, hooks, exit

}  // namespace

void TelemetryObserver::OnStart(supervisor::RunControl& control) {
  control_ = &control;
  clock_ = &control.clock();
  auto& io = control.io();
  if (mirror_feed_) {
    std::lock_guard lock(mirror_feed_->mutex);
    mirror_feed_->io = &io;
    mirror_feed_->clock = &control.clock();
  }
  record_.emplace(job_, *clock_);
  hooks_.emplace(job_, *clock_, [this](const std::string& name, const hooks::HookResult& r, std::int64_t started_ms) {
    record_->ledger().AddHook({name, r.outcome, r.message, started_ms, r.duration.count()});
    ++hook_runs_[{name, r.outcome}];
    record_->Save();
  });
  record_->Load();
  auto& ledger = record_->ledger();
  ledger.first_progress_from = job_.health.heartbeat_file              ? "heartbeat"
                               : !job_.health.progress_pattern.empty() ? "progress_pattern"
                                                                       : "first_checkpoint";
  // The loader compiled the same pattern already: this cannot throw.
  if (!job_.health.heartbeat_file && !job_.health.progress_pattern.empty()) {
    progress_.emplace(job_.health.progress_pattern, std::regex::ECMAScript);
  }
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
  last_step_.reset();  // after the settling: the notices of the attempt before were named with it
  TrackProgress();
  trainer_started_ = clock_->Now();
  stop_signal_at_.reset();
  systemd_.Ready();
  UpdateStatus();
}

void TelemetryObserver::OnAttemptEnded(const state::AttemptRecord& record) {
  record_->AttemptEnded(record);
  current_.reset();
  awaiting_progress_ = false;
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
  if (mirror_feed_) {
    TakeMirrored();  // the planner's newest verdict
    r.mirror = true;
    if (durability_)
      r.predicted_durable_ms = (durability_->save.value_or(Duration::zero()) + durability_->upload).count();
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
  DetachMirror();
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
  SettleDurable(record_->ledger(), durable_, std::nullopt);
  record_->Save();
  const auto report_path = WriteRunReport();
  systemd_.Notify("STOPPING=1\nSTATUS=exit " + std::to_string(code) + ": " + message);
  if (metrics_) metrics_->Stop();
  facts_.reset();
  for (auto* t : {&heartbeat_, &budget_timer_, &progress_timer_}) t->reset();
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
  auto observer = std::make_unique<TelemetryObserver>(job, watcher, std::move(endpoint), SdNotifier::FromEnvironment(),
                                                      std::move(write_report));
  observer->Subscribe(mirror);
  out.push_back(std::move(observer));
  return out;
}

}  // namespace spotvisor::telemetry

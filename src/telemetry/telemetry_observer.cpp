// The telemetry observer: one RunObserver that turns what happens in a run into the run
// record (run_record.hpp), the metrics endpoint, systemd's status (systemd_status.hpp),
// the budget check (the decision is supervisor/budget.hpp's), the hooks (run_hooks.hpp),
// GPU samples (gpu_sampler.hpp), instance facts and the report. io thread only; NVML runs
// on the sampler's thread. Invariant: after OnExit nothing of ours keeps the io_context
// busy except a running on_finish hook (and the watchdog petting that covers it).
#include "spotvisor/telemetry/telemetry_observer.hpp"

#include <boost/asio/io_context.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/steady_timer.hpp>
#include <map>
#include <nlohmann/json.hpp>

#include "gpu_sampler.hpp"
#include "run_hooks.hpp"
#include "run_record.hpp"
#include "spotvisor/checkpoint_watch/checkpoint_watcher.hpp"
#include "spotvisor/log/log.hpp"
#include "spotvisor/preemption/instance_facts.hpp"
#include "spotvisor/supervisor/budget.hpp"
#include "spotvisor/supervisor/outcome.hpp"
#include "spotvisor/telemetry/metrics_server.hpp"
#include "spotvisor/telemetry/report.hpp"
#include "spotvisor/telemetry/run_metrics.hpp"
#include "spotvisor/util/secret_file.hpp"
#include "systemd_status.hpp"

namespace spotvisor::telemetry {

using log::Log;
using log::LogLevel;
using log::Quote;
namespace {

namespace asio = boost::asio;
using std::chrono::steady_clock;
using supervisor::Phase;

constexpr auto kStopMargin = std::chrono::seconds(30);  // after the group is gone: report, hooks, exit
constexpr auto kHeartbeat = std::chrono::seconds(30);   // run.json refresh: billed time survives a SIGKILL

double Seconds(steady_clock::duration d) { return std::chrono::duration<double>(d).count(); }

class TelemetryObserver final : public supervisor::RunObserver {
 public:
  TelemetryObserver(const config::JobConfig& job, checkpoint_watch::CheckpointWatcher* watcher,
                    std::optional<MetricsEndpoint> endpoint, std::optional<SdNotifier> notifier)
      : job_(job),
        endpoint_(std::move(endpoint)),
        systemd_(std::move(notifier)),
        record_(job),
        hooks_(job, [this](const std::string& name, const hooks::HookResult& r, std::int64_t started_ms) {
          record_.ledger().AddHook({name, r.outcome, r.message, started_ms, r.duration.count()});
          ++hook_runs_[{name, r.outcome}];
          record_.Save();
        }) {
    if (!watcher) return;
    watcher->Subscribe([this](const std::vector<checkpoint_watch::CheckpointVerdict>& verdicts) {
      for (const auto& v : verdicts) OnCheckpoint(v);
    });
  }

  void OnStart(supervisor::RunControl& control) override {
    control_ = &control;
    auto& io = control.io();
    record_.Load();
    hooks_.RunBeforeStart(record_.last_attempt(), control.children());
    hooks_.Start(io, control.children());
    StartMetrics(io);
    StartTimers(io);
    gpu_.emplace(io, job_.telemetry.gpu_interval, record_.ledger().gpu, [this] { record_.Save(); });
    gpu_->Start();
    AskInstanceFacts(io);
    systemd_.Notify("STATUS=starting " + job_.job.name);
    LogBudgetUnknowns();
  }

  void OnSelection(const checkpoint::Selection& selection) override {
    auto& ledger = record_.ledger();
    for (const auto& rejected : selection.rejected) {
      const std::string name = rejected.path.filename().string();
      bool seen = false;
      for (const auto& c : ledger.checkpoints) seen = seen || (c.name == name && !c.good);
      if (seen) continue;
      CheckpointRecord r;
      r.name = name;
      r.good = false;
      r.reason = rejected.reason;
      r.attempt = current_ ? current_->attempt : record_.last_attempt();
      r.seen_ms = state::UnixMillisNow();
      ledger.AddCheckpoint(r);
    }
    record_.Save();
  }

  void OnAttemptStarted(const supervisor::SpawnAction& start, pid_t pid) override {
    state::AttemptRecord r;
    r.attempt = start.attempt;
    r.pid = pid;
    r.started_ms = state::UnixMillisNow();
    if (start.resume) r.resume_from = start.resume->path.string(), r.resume_step = start.resume->step;
    current_ = r;
    hooks_.SetPlace(start.place);
    record_.AttemptStarted(start.attempt);
    trainer_started_ = steady_clock::now();
    stop_signal_at_.reset();
    systemd_.Ready();
    UpdateStatus();
  }

  void OnAttemptEnded(const state::AttemptRecord& record) override {
    record_.AttemptEnded(record);
    current_.reset();
    if (stop_signal_at_) last_grace_used_ = Seconds(steady_clock::now() - *stop_signal_at_);
    stop_signal_at_.reset();
    UpdateStatus();
  }

  void OnNotice(const preemption::Notice& n) override {
    NoticeRecord r;
    r.received_ms = state::UnixMillisNow();
    r.provider = n.provider;
    r.kind = n.kind;
    r.action = n.action == preemption::NoticeAction::kStop ? "stop" : "checkpoint";
    if (n.deadline) {
      r.deadline_ms = std::chrono::duration_cast<std::chrono::milliseconds>(n.deadline->time_since_epoch()).count();
    }
    r.attempt = current_ ? current_->attempt : record_.last_attempt();
    auto& notices = record_.ledger().notices;
    notices.push_back(r);
    awaiting_signal_ = notices.size() - 1;
    notice_at_ = steady_clock::now();
    // The driver signals the trainer in this same handler, after the observers: the record
    // and the hook go to the back of the io queue instead of delaying that signal.
    asio::post(control_->io(), [this, provider = n.provider, kind = n.kind] {
      if (exited_) return;
      record_.Save();
      hooks_.Run("on_notice", job_.hooks.on_notice, record_.last_attempt(),
                 {{"provider", provider}, {"notice_kind", kind}});
    });
  }

  void OnSignalSent(int signo, config::SignalTarget) override {
    const bool stop_signal = signo == job_.signals.on_notice;
    if (awaiting_signal_ && notice_at_) {
      record_.ledger().notices[*awaiting_signal_].signal_ms = state::UnixMillisNow();
      last_notice_to_signal_ = Seconds(steady_clock::now() - *notice_at_);
      awaiting_signal_.reset();
      record_.Save();
    }
    if (stop_signal && !stop_signal_at_) stop_signal_at_ = steady_clock::now();
  }

  void OnPhase(Phase phase) override {
    phase_ = phase;
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

  void OnExit(int code, const std::string& message) override {
    exited_ = true;
    auto& sessions = record_.ledger().sessions;
    if (!sessions.empty()) {
      auto& s = sessions.back();
      s.ended_ms = s.last_seen_ms = state::UnixMillisNow();
      s.exit_code = code;
      s.exit_message = message;
    }
    record_.Save();
    const auto report_path = WriteRunReport();
    systemd_.Notify("STOPPING=1\nSTATUS=exit " + std::to_string(code) + ": " + message);
    if (metrics_) metrics_->Stop();
    facts_.reset();
    for (auto* t : {&heartbeat_, &budget_timer_}) t->reset();
    if (gpu_) gpu_->Stop();
    using supervisor::ExitCode;
    const bool finish = code == supervisor::Code(ExitCode::kDone) || code == supervisor::Code(ExitCode::kFailed) ||
                        code == supervisor::Code(ExitCode::kBudget);
    if (finish && !job_.hooks.on_finish.command.empty()) {
      hooks_.Run("on_finish", job_.hooks.on_finish, record_.last_attempt(),
                 {{"exit_code", std::to_string(code)}, {"report", report_path ? report_path->string() : ""}},
                 [this] { systemd_.StopWatchdog(); });
    } else {
      systemd_.StopWatchdog();
    }
  }

 private:
  // ---- start ----
  void AskInstanceFacts(asio::io_context& io) {
    facts_ = preemption::InstanceFactsQuery::Make(io, job_.provider);
    if (!facts_) return;
    facts_->Start([this](preemption::InstanceFacts f) { record_.AddInstanceFacts(f); });
  }

  void StartMetrics(asio::io_context& io) {
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

  void StartTimers(asio::io_context& io) {
    heartbeat_ = std::make_unique<asio::steady_timer>(io);
    Every(*heartbeat_, kHeartbeat, [this] {
      record_.ledger().sessions.back().last_seen_ms = state::UnixMillisNow();
      record_.Save();
    });
    if (job_.cost.configured && job_.cost.budget > 0) {
      budget_timer_ = std::make_unique<asio::steady_timer>(io);
      Every(*budget_timer_, job_.cost.check_interval, [this] { CheckBudget(); });
    }
    systemd_.StartWatchdog(io);
  }

  // Runs `what` every `period` until the timer is reset (destroyed) or cancelled.
  void Every(asio::steady_timer& timer, Duration period, std::function<void()> what) {
    timer.expires_after(period);
    timer.async_wait([this, &timer, period, what = std::move(what)](const boost::system::error_code& ec) mutable {
      if (ec) return;
      what();
      Every(timer, period, std::move(what));
    });
  }

  // ---- checkpoints, budget ----
  void OnCheckpoint(const checkpoint_watch::CheckpointVerdict& v) {
    if (exited_) return;
    CheckpointRecord r;
    r.name = v.name;
    r.step = v.step;
    r.bytes = v.shape.bytes;
    r.mtime_ms = v.shape.mtime_ms;
    if (v.shape.birth_ms && v.shape.mtime_ms >= *v.shape.birth_ms) r.write_ms = v.shape.mtime_ms - *v.shape.birth_ms;
    r.good = v.good;
    r.reason = v.reason;
    r.seen_ms = std::chrono::duration_cast<std::chrono::milliseconds>(v.detected_at.time_since_epoch()).count();
    r.attempt = current_ ? current_->attempt : record_.last_attempt();
    record_.ledger().AddCheckpoint(r);
    record_.Save();
    Log(r.good ? LogLevel::kInfo : LogLevel::kWarning,
        "event=checkpoint_seen name=" + Quote(r.name) + " step=" + std::to_string(r.step) +
            " verdict=" + (r.good ? "good" : "corrupt") + " bytes=" + std::to_string(r.bytes) +
            " write_ms=" + (r.write_ms ? std::to_string(*r.write_ms) : "unknown") + " reason=" + Quote(r.reason));
    UpdateStatus();
    if (r.good) {
      hooks_.Run("on_checkpoint", job_.hooks.on_checkpoint, record_.last_attempt(),
                 {{"checkpoint", v.path.string()}, {"step", std::to_string(r.step)}});
    }
  }

  void CheckBudget() {
    if (budget_stopped_) return;
    auto& ledger = record_.ledger();
    const auto d =
        supervisor::DecideBudget(record_.Summary(current_).cost, job_.cost, ledger.budget_warned_ms.has_value());
    if (d.warn) {
      ledger.budget_warned_ms = state::UnixMillisNow();
      Log(LogLevel::kWarning, "event=budget_warning estimate=" + Quote(d.estimate) + " budget=" + d.budget +
                                  " warn_fraction=" + std::to_string(job_.cost.warn_fraction));
      record_.Save();
    }
    if (!d.stop) return;
    budget_stopped_ = true;
    ledger.budget_exhausted_ms = state::UnixMillisNow();
    record_.Save();
    Log(LogLevel::kError, "event=budget_exhausted estimate=" + Quote(d.estimate) + " budget=" + d.budget +
                              " action=\"checkpoint and stop\"");
    control_->RequestStop(supervisor::StopReason::kBudget, d.stop_detail);
  }

  void LogBudgetUnknowns() {
    if (!job_.cost.configured) return;
    const auto s = record_.Summary(current_);
    if (s.cost.unknown.empty()) return;
    std::string names;
    for (const auto& n : s.cost.unknown) names += (names.empty() ? "" : ",") + n;
    Log(job_.cost.budget > 0 ? LogLevel::kWarning : LogLevel::kInfo,
        "event=cost_unknown components=" + Quote(names) +
            " detail=\"no price: listed as unknown in the report, not counted as zero; a budget counts only priced and "
            "ranged components\"");
  }

  // ---- output ----
  std::optional<std::filesystem::path> WriteRunReport() {
    auto report = BuildReport(job_.telemetry.state_dir, state::UnixMillisNow());
    if (!report) {
      Log(LogLevel::kError, "event=report_failed error=" + Quote(report.error().message));
      return std::nullopt;
    }
    auto path = WriteReport(*report, job_.telemetry.state_dir, job_.telemetry.report_path);
    if (!path) {
      Log(LogLevel::kError, "event=report_failed error=" + Quote(path.error().message));
      return std::nullopt;
    }
    Log(LogLevel::kInfo, "event=report_written path=" + Quote(path->string()) +
                             " cost=" + Quote((*report)["cost"]["total_text"].get<std::string>()));
    return *path;
  }

  std::string RenderMetrics() const {
    const auto summary = record_.Summary(current_);
    LiveView v;
    v.ledger = &record_.ledger();
    v.summary = &summary;
    v.phase = PhaseName(phase_);
    if (current_) v.trainer_uptime_seconds = Seconds(steady_clock::now() - trainer_started_);
    v.last_notice_to_signal_seconds = last_notice_to_signal_;
    v.last_grace_used_seconds = last_grace_used_;
    v.gpu_sampled = gpu_ && gpu_->sampled();
    if (gpu_) v.gpus = gpu_->samples();
    v.hook_runs = hook_runs_;
    v.now_ms = state::UnixMillisNow();
    return RenderRunMetrics(v);
  }

  void UpdateStatus() {
    const auto s = record_.Summary(current_);
    std::string status = "STATUS=" + std::string(PhaseName(phase_));
    if (current_) status += ", attempt " + std::to_string(current_->attempt);
    status += s.final_step ? ", newest good checkpoint step " + std::to_string(*s.final_step) : ", no checkpoint yet";
    systemd_.Notify(status);
  }

  const config::JobConfig& job_;                 // outlives us
  std::optional<MetricsEndpoint> endpoint_;      // metrics on, with its token
  SystemdStatus systemd_;                        // sd_notify and the watchdog
  RunRecord record_;                             // run.json and the attempts
  RunHooks hooks_;                               // the job's hooks
  supervisor::RunControl* control_ = nullptr;    // from OnStart
  std::optional<state::AttemptRecord> current_;  // the attempt in progress
  Phase phase_ = Phase::kIdle;
  steady_clock::time_point trainer_started_{};
  std::optional<steady_clock::time_point> notice_at_, stop_signal_at_;
  std::optional<std::size_t> awaiting_signal_;  // notice index without signal yet
  std::optional<double> last_notice_to_signal_, last_grace_used_;
  std::map<std::pair<std::string, std::string>, int> hook_runs_;
  std::unique_ptr<MetricsServer> metrics_;
  std::unique_ptr<preemption::InstanceFactsQuery> facts_;  // until it answers or we exit
  std::unique_ptr<asio::steady_timer> heartbeat_, budget_timer_;
  std::optional<GpuSampler> gpu_;  // NVML, on its own thread
  bool budget_stopped_ = false, exited_ = false;
};

}  // namespace

Result<std::vector<std::unique_ptr<supervisor::RunObserver>>> MakeTelemetryObservers(
    const config::JobConfig& job, checkpoint_watch::CheckpointWatcher* watcher) {
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
  out.push_back(std::make_unique<TelemetryObserver>(job, watcher, std::move(endpoint), SdNotifier::FromEnvironment()));
  return out;
}

}  // namespace spotvisor::telemetry

// The telemetry observer: one RunObserver that keeps the run record and feeds the metrics
// endpoint, sd_notify, the budget check, the hooks and the report. io thread only, except
// NVML sampling and checkpoint validation, which run on their own threads and post back.
// Invariant: after OnExit nothing of ours keeps the io_context busy except a running
// on_finish hook (and the watchdog petting that covers it).
#include "spotvisor/telemetry/telemetry_observer.hpp"

#include <boost/asio/io_context.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/thread_pool.hpp>
#include <nlohmann/json.hpp>
#include <set>

#include "spotvisor/config/templates.hpp"
#include "spotvisor/hooks/hook_runner.hpp"
#include "spotvisor/preemption/instance_facts.hpp"
#include "spotvisor/supervisor/outcome.hpp"
#include "spotvisor/telemetry/checkpoint_tracker.hpp"
#include "spotvisor/telemetry/log.hpp"
#include "spotvisor/telemetry/metrics_server.hpp"
#include "spotvisor/telemetry/nvml.hpp"
#include "spotvisor/telemetry/report.hpp"
#include "spotvisor/telemetry/run_facts.hpp"
#include "spotvisor/telemetry/run_metrics.hpp"
#include "spotvisor/telemetry/sd_notify.hpp"
#include "spotvisor/telemetry/secret_file.hpp"

namespace spotvisor::telemetry {
namespace {

constexpr auto kStopMargin = std::chrono::seconds(30);  // after the group is gone: report, hooks, exit

namespace asio = boost::asio;
using std::chrono::steady_clock;
using supervisor::Phase;

constexpr auto kHeartbeat = std::chrono::seconds(30);       // run.json refresh: billed time survives a SIGKILL
constexpr auto kCheckpointScan = std::chrono::seconds(2);
constexpr std::size_t kAttemptsKept = 64;                  // ended attempts held as records; older ones are folded

double Seconds(steady_clock::duration d) { return std::chrono::duration<double>(d).count(); }

class TelemetryObserver final : public supervisor::RunObserver {
 public:
  TelemetryObserver(const config::JobConfig& job, std::optional<MetricsEndpoint> endpoint,
                    std::optional<SdNotifier> notifier)
      : job_(job), endpoint_(std::move(endpoint)), notifier_(std::move(notifier)) {}

  ~TelemetryObserver() override {
    tracker_.reset();
    gpu_pool_.join();
  }

  void OnStart(supervisor::RunControl& control) override {
    control_ = &control;
    auto& io = control.io();
    LoadRecord();
    RunBeforeStartHook();
    hooks_ = std::make_unique<hooks::HookRunner>(io, control.children(), job_.job.workdir, job_.job.env);
    StartMetrics(io);
    StartTimers(io);
    StartGpu(io);
    AskInstanceFacts(io);
    std::set<std::string> known;
    for (const auto& c : ledger_.checkpoints) known.insert(c.name);
    tracker_ = std::make_unique<CheckpointTracker>(io, job_, kCheckpointScan,
                                                   [this](CheckpointRecord r, std::filesystem::path p) { OnCheckpoint(std::move(r), p); });
    tracker_->Start(std::move(known));
    Notify("STATUS=starting " + job_.job.name);
    LogBudgetUnknowns();
  }

  void OnSelection(const checkpoint::Selection& selection) override {
    for (const auto& rejected : selection.rejected) {
      const std::string name = rejected.path.filename().string();
      bool seen = false;
      for (const auto& c : ledger_.checkpoints) seen = seen || (c.name == name && !c.good);
      if (seen) continue;
      CheckpointRecord r;
      r.name = name;
      r.good = false;
      r.reason = rejected.reason;
      r.attempt = current_ ? current_->attempt : last_attempt_;
      r.seen_ms = state::UnixMillisNow();
      ledger_.AddCheckpoint(r);
    }
    Save();
    if (tracker_) tracker_->ScanNow();
  }

  void OnAttemptStarted(int attempt, pid_t pid, const std::optional<checkpoint::ResumePoint>& resume) override {
    state::AttemptRecord r;
    r.attempt = attempt;
    r.pid = pid;
    r.started_ms = state::UnixMillisNow();
    if (resume) r.resume_from = resume->path.string(), r.resume_step = resume->step;
    current_ = r;
    last_attempt_ = attempt;
    trainer_started_ = steady_clock::now();
    stop_signal_at_.reset();
    if (!ready_sent_) ready_sent_ = Notify("READY=1");
    UpdateStatus();
  }

  void OnAttemptEnded(const state::AttemptRecord& record) override {
    attempts_.push_back(record);
    FoldOldest(ledger_, attempts_, folded_, kAttemptsKept);
    current_.reset();
    if (stop_signal_at_) last_grace_used_ = Seconds(steady_clock::now() - *stop_signal_at_);
    stop_signal_at_.reset();
    UpdateStatus();
    if (tracker_) tracker_->ScanNow();
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
    r.attempt = current_ ? current_->attempt : last_attempt_;
    ledger_.notices.push_back(r);
    awaiting_signal_ = ledger_.notices.size() - 1;
    notice_at_ = steady_clock::now();
    // The driver signals the trainer in this same handler, after the observers: the record
    // and the hook go to the back of the io queue instead of delaying that signal.
    asio::post(control_->io(), [this, provider = n.provider, kind = n.kind] {
      if (exited_) return;
      Save();
      RunHook("on_notice", job_.hooks.on_notice, {{"provider", provider}, {"notice_kind", kind}});
    });
  }

  void OnSignalSent(int signo, config::SignalTarget) override {
    const bool stop_signal = signo == job_.signals.on_notice;
    if (awaiting_signal_ && notice_at_) {
      ledger_.notices[*awaiting_signal_].signal_ms = state::UnixMillisNow();
      last_notice_to_signal_ = Seconds(steady_clock::now() - *notice_at_);
      awaiting_signal_.reset();
      Save();
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
      Notify("EXTEND_TIMEOUT_USEC=" +
             std::to_string(std::chrono::duration_cast<std::chrono::microseconds>(stop).count()));
    }
  }

  void OnExit(int code, const std::string& message) override {
    exited_ = true;
    if (!ledger_.sessions.empty()) {
      auto& s = ledger_.sessions.back();
      s.ended_ms = s.last_seen_ms = state::UnixMillisNow();
      s.exit_code = code;
      s.exit_message = message;
    }
    Save();
    const auto report_path = WriteRunReport();
    Notify("STOPPING=1\nSTATUS=exit " + std::to_string(code) + ": " + message);
    if (metrics_) metrics_->Stop();
    if (tracker_) tracker_->Stop();
    facts_.reset();
    for (auto* t : {&heartbeat_, &budget_timer_, &gpu_timer_}) t->reset();
    const bool finish = code == supervisor::Code(supervisor::ExitCode::kDone) || code == supervisor::Code(supervisor::ExitCode::kFailed) || code == supervisor::Code(supervisor::ExitCode::kBudget);
    if (finish && !job_.hooks.on_finish.command.empty()) {
      RunHook("on_finish", job_.hooks.on_finish,
              {{"exit_code", std::to_string(code)}, {"report", report_path ? report_path->string() : ""}},
              [this] { watchdog_.reset(); });
    } else {
      watchdog_.reset();
    }
  }

 private:
  // ---- start ----
  void LoadRecord() {
    auto loaded = RunLedger::Load(job_.telemetry.state_dir);
    if (loaded) {
      ledger_ = std::move(*loaded);
    } else {
      const auto aside = job_.telemetry.state_dir / ("run.json.corrupt-" + std::to_string(state::UnixMillisNow()));
      std::error_code ec;
      std::filesystem::rename(job_.telemetry.state_dir / kLedgerFileName, aside, ec);
      Log(LogLevel::kError, "event=run_record_corrupt error=" + Quote(loaded.error().message) + " moved_to=" + Quote(aside.string()));
    }
    if (auto journal = state::Journal::Open(job_.telemetry.state_dir)) attempts_ = journal->ReadAttempts();
    for (const auto& a : attempts_) last_attempt_ = std::max(last_attempt_, a.attempt);
    FoldOldest(ledger_, attempts_, folded_, kAttemptsKept);
    ledger_.job = job_.job.name;
    ledger_.labels = job_.job.labels;
    ledger_.version = SPOTVISOR_VERSION;
    ledger_.config_hash = ConfigHash(job_);
    ledger_.fingerprints = FingerprintFiles(job_.telemetry.fingerprint_files);
    for (const auto& f : ledger_.fingerprints) {
      if (!f.error.empty()) Log(LogLevel::kWarning, "event=fingerprint_failed path=" + Quote(f.path) + " error=" + Quote(f.error));
    }
    ledger_.host = DescribeHost(job_);
    ledger_.cost = job_.cost;
    SessionRecord s;
    s.started_ms = s.last_seen_ms = state::UnixMillisNow();
    s.boot_ms = BootTimeMs();
    s.hostname = ledger_.host.hostname;
    ledger_.sessions.push_back(s);
    Save();
  }

  // before_start must finish before the trainer starts (it restores data), and the
  // observer seam cannot hold the start back, so it runs to completion here, on a private
  // io_context: the only place we block the io thread, bounded by the hook's timeout,
  // before anything is supervised.
  void RunBeforeStartHook() {
    if (job_.hooks.before_start.command.empty()) return;
    asio::io_context local;
    hooks::HookRunner runner(local, control_->children(), job_.job.workdir, job_.job.env);
    StartHook(runner, "before_start", job_.hooks.before_start, {}, nullptr);
    local.run();
  }

  // Instance type, zone and region from the metadata service (DMI knows only some of it).
  void AskInstanceFacts(asio::io_context& io) {
    facts_ = preemption::InstanceFactsQuery::Make(io, job_.provider);
    if (!facts_) return;
    facts_->Start([this](preemption::InstanceFacts f) {
      auto& h = ledger_.host;
      if (!f.instance_type.empty()) h.instance_type = f.instance_type;
      if (!f.zone.empty()) h.zone = f.zone;
      if (!f.region.empty()) h.region = f.region;
      if (!f.instance_type.empty() || !f.zone.empty() || !f.region.empty()) h.source = "metadata service";
      Log(f.trouble.empty() ? LogLevel::kInfo : LogLevel::kWarning,
          "event=instance_facts instance_type=" + Quote(h.instance_type) + " zone=" + Quote(h.zone) +
              " region=" + Quote(h.region) + (f.trouble.empty() ? "" : " unanswered=" + Quote(f.trouble)));
      Save();
    });
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
    Log(LogLevel::kInfo, "event=metrics_listening address=" + *bound + " auth=" + (endpoint_->token.empty() ? "none" : "bearer"));
  }

  void StartTimers(asio::io_context& io) {
    heartbeat_ = std::make_unique<asio::steady_timer>(io);
    Every(*heartbeat_, kHeartbeat, [this] {
      ledger_.sessions.back().last_seen_ms = state::UnixMillisNow();
      Save();
    });
    if (job_.cost.configured && job_.cost.budget > 0) {
      budget_timer_ = std::make_unique<asio::steady_timer>(io);
      Every(*budget_timer_, job_.cost.check_interval, [this] { CheckBudget(); });
    }
    if (notifier_ && notifier_->watchdog_interval()) {
      watchdog_ = std::make_unique<asio::steady_timer>(io);
      Notify("WATCHDOG=1");
      Every(*watchdog_, *notifier_->watchdog_interval(), [this] { Notify("WATCHDOG=1"); });
    }
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

  void StartGpu(asio::io_context& io) {
    if (job_.telemetry.gpu_interval.count() <= 0) return;
    gpu_timer_ = std::make_unique<asio::steady_timer>(io);
    asio::post(gpu_pool_, [this, &io] {
      auto nvml = Nvml::Load();
      asio::post(io, [this, nvml = std::make_shared<decltype(nvml)>(std::move(nvml))]() mutable {
        if (!*nvml) {
          ledger_.gpu.available = false;
          ledger_.gpu.reason = (*nvml).error().message;
          Log(LogLevel::kInfo, "event=gpu_unavailable reason=" + Quote(ledger_.gpu.reason));
          Save();
          return;
        }
        nvml_ = std::move(**nvml);
        ledger_.gpu.available = true;
        ledger_.gpu.driver = nvml_->driver_version();
        Log(LogLevel::kInfo, "event=gpu_found devices=" + std::to_string(nvml_->device_count()) + " driver=" + ledger_.gpu.driver);
        SampleGpu();
        if (gpu_timer_) Every(*gpu_timer_, job_.telemetry.gpu_interval, [this] { SampleGpu(); });
      });
    });
  }

  void SampleGpu() {
    if (!nvml_ || !control_) return;
    asio::post(gpu_pool_, [this, &io = control_->io()] {
      auto samples = nvml_->Sample();
      asio::post(io, [this, samples = std::move(samples)] {
        gpus_ = samples;
        ledger_.gpu.models.clear();
        for (const auto& g : gpus_) {
          ledger_.gpu.models.push_back(g.name);
          ledger_.gpu.memory_total_bytes = std::max(ledger_.gpu.memory_total_bytes, g.memory_total);
          ledger_.gpu.peak_vram_bytes = std::max(ledger_.gpu.peak_vram_bytes, g.memory_used);
        }
      });
    });
  }

  // ---- checkpoints, budget ----
  void OnCheckpoint(CheckpointRecord r, const std::filesystem::path& path) {
    r.attempt = current_ ? current_->attempt : last_attempt_;
    ledger_.AddCheckpoint(r);
    Save();
    Log(r.good ? LogLevel::kInfo : LogLevel::kWarning,
        "event=checkpoint_seen name=" + Quote(r.name) + " step=" + std::to_string(r.step) + " verdict=" +
            (r.good ? "good" : "corrupt") + " bytes=" + std::to_string(r.bytes) +
            " write_ms=" + (r.write_ms ? std::to_string(*r.write_ms) : "unknown") + " reason=" + Quote(r.reason));
    UpdateStatus();
    if (r.good && !exited_) {
      RunHook("on_checkpoint", job_.hooks.on_checkpoint, {{"checkpoint", path.string()}, {"step", std::to_string(r.step)}});
    }
  }

  RunSummary Summary() const {
    RunLedger view = ledger_;
    if (!view.sessions.empty() && !view.sessions.back().ended_ms) view.sessions.back().last_seen_ms = state::UnixMillisNow();
    return Summarize(view, attempts_, state::UnixMillisNow(), current_, folded_);
  }

  void CheckBudget() {
    if (budget_stopped_) return;
    const auto s = Summary();
    const double budget = job_.cost.budget;
    const std::string estimate = FormatTotal(s.cost);
    if (!ledger_.budget_warned_ms && s.cost.high >= budget * job_.cost.warn_fraction) {
      ledger_.budget_warned_ms = state::UnixMillisNow();
      Log(LogLevel::kWarning, "event=budget_warning estimate=" + Quote(estimate) + " budget=" + cost::FormatMoney(budget) +
                                  " warn_fraction=" + std::to_string(job_.cost.warn_fraction));
      Save();
    }
    if (s.cost.high >= budget) {
      budget_stopped_ = true;
      ledger_.budget_exhausted_ms = state::UnixMillisNow();
      Save();
      const std::string detail = "cost budget exhausted: estimate " + estimate + " reached cost.budget " +
                                 cost::FormatMoney(budget) + " " + job_.cost.currency;
      Log(LogLevel::kError, "event=budget_exhausted estimate=" + Quote(estimate) + " budget=" + cost::FormatMoney(budget) +
                                " action=\"checkpoint and stop\"");
      control_->RequestStop(supervisor::StopReason::kBudget, detail);
    }
  }

  void LogBudgetUnknowns() {
    if (!job_.cost.configured) return;
    const auto s = Summary();
    if (s.cost.unknown.empty()) return;
    std::string names;
    for (const auto& n : s.cost.unknown) names += (names.empty() ? "" : ",") + n;
    Log(job_.cost.budget > 0 ? LogLevel::kWarning : LogLevel::kInfo,
        "event=cost_unknown components=" + Quote(names) +
            " detail=\"no price: listed as unknown in the report, not counted as zero; a budget counts only priced and ranged components\"");
  }

  // ---- hooks ----
  void RunHook(const std::string& name, const config::HookSpec& spec, std::map<std::string, std::string> vars,
               std::function<void()> after = nullptr) {
    if (spec.command.empty() || !hooks_) {
      if (after) after();
      return;
    }
    StartHook(*hooks_, name, spec, std::move(vars), std::move(after));
  }

  void StartHook(hooks::HookRunner& runner, const std::string& name, const config::HookSpec& spec,
                 std::map<std::string, std::string> extra, std::function<void()> after) {
    config::TemplateVars vars;
    for (const auto& placeholder : config::kHookTemplates) vars[placeholder] = "";
    vars["job"] = job_.job.name;
    vars["attempt"] = std::to_string(last_attempt_);
    vars["checkpoint_dir"] = job_.checkpoints.dir ? job_.checkpoints.dir->string() : "";
    vars["result_file"] = job_.job.result_file ? job_.job.result_file->string() : "";
    vars["state_dir"] = job_.telemetry.state_dir.string();
    vars["hook"] = name;
    for (auto& [k, v] : extra) vars[k] = v;
    const auto started_ms = state::UnixMillisNow();
    auto done = [this, name, started_ms, after](const hooks::HookResult& r) {
      ledger_.AddHook({name, r.outcome, r.message, started_ms, r.duration.count()});
      ++hook_runs_[{name, r.outcome}];
      Save();
      if (after) after();
    };
    auto argv = config::ExpandArgv(spec.command, vars);
    if (!argv) {
      hooks::HookResult r{name, "spawn-failed", std::nullopt, std::nullopt, Duration(0), argv.error().message};
      Log(LogLevel::kError, "event=hook_failed hook=" + name + " outcome=spawn-failed error=" + Quote(r.message));
      done(r);
      return;
    }
    std::map<std::string, std::string> env{{"SPOTVISOR_HOOK", name}, {"SPOTVISOR_JOB", job_.job.name},
                                           {"SPOTVISOR_STATE_DIR", vars["state_dir"]}};
    for (const auto& [key, var] : {std::pair{"SPOTVISOR_CHECKPOINT", "checkpoint"}, std::pair{"SPOTVISOR_STEP", "step"},
                                   std::pair{"SPOTVISOR_EXIT_CODE", "exit_code"}, std::pair{"SPOTVISOR_REPORT", "report"}}) {
      if (!vars[var].empty()) env[key] = vars[var];
    }
    runner.Run(name, *argv, spec.timeout, env, done);
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
    Log(LogLevel::kInfo, "event=report_written path=" + Quote(path->string()) + " cost=" +
                             Quote((*report)["cost"]["total_text"].get<std::string>()));
    return *path;
  }

  std::string RenderMetrics() const {
    const auto summary = Summary();
    LiveView v;
    v.ledger = &ledger_;
    v.summary = &summary;
    v.phase = PhaseName(phase_);
    if (current_) v.trainer_uptime_seconds = Seconds(steady_clock::now() - trainer_started_);
    v.last_notice_to_signal_seconds = last_notice_to_signal_;
    v.last_grace_used_seconds = last_grace_used_;
    v.gpu_sampled = nvml_ != nullptr;
    v.gpus = gpus_;
    v.hook_runs = hook_runs_;
    v.now_ms = state::UnixMillisNow();
    return RenderRunMetrics(v);
  }

  void UpdateStatus() {
    const auto s = Summary();
    std::string status = "STATUS=" + std::string(PhaseName(phase_));
    if (current_) status += ", attempt " + std::to_string(current_->attempt);
    status += s.final_step ? ", newest good checkpoint step " + std::to_string(*s.final_step) : ", no checkpoint yet";
    Notify(status);
  }

  bool Notify(const std::string& message) {
    if (!notifier_) return false;
    const bool sent = notifier_->Send(message);
    if (!sent && !notify_failed_) {
      notify_failed_ = true;
      Log(LogLevel::kWarning, "event=sd_notify_failed socket=" + Quote(notifier_->socket()));
    }
    return sent;
  }

  void Save() {
    // Said once when writing starts to fail and once when it works again, never per save.
    const Status s = ledger_.Save(job_.telemetry.state_dir);
    if (!s && !save_failed_) {
      save_failed_ = true;
      Log(LogLevel::kError, "event=run_record_write_failed error=" + Quote(s.error().message));
    } else if (s && save_failed_) {
      save_failed_ = false;
      Log(LogLevel::kInfo, "event=run_record_write_recovered");
    }
  }

  const config::JobConfig& job_;                          // outlives us
  std::optional<MetricsEndpoint> endpoint_;               // metrics on, with its token
  std::optional<SdNotifier> notifier_;                    // run by systemd
  supervisor::RunControl* control_ = nullptr;             // from OnStart
  RunLedger ledger_;                                      // run.json
  std::vector<state::AttemptRecord> attempts_;            // the newest ended attempts (journal)
  FoldedAttempts folded_;                                 // the older ones, summed
  std::optional<state::AttemptRecord> current_;           // the attempt in progress
  int last_attempt_ = 0;
  Phase phase_ = Phase::kIdle;
  steady_clock::time_point trainer_started_{};
  std::optional<steady_clock::time_point> notice_at_, stop_signal_at_;
  std::optional<std::size_t> awaiting_signal_;            // notice index without signal yet
  std::optional<double> last_notice_to_signal_, last_grace_used_;
  std::map<std::pair<std::string, std::string>, int> hook_runs_;
  std::unique_ptr<MetricsServer> metrics_;
  std::unique_ptr<preemption::InstanceFactsQuery> facts_;  // until it answers or we exit
  std::unique_ptr<hooks::HookRunner> hooks_;
  std::unique_ptr<CheckpointTracker> tracker_;
  std::unique_ptr<asio::steady_timer> heartbeat_, budget_timer_, watchdog_, gpu_timer_;
  asio::thread_pool gpu_pool_{1};                         // NVML calls
  std::unique_ptr<Nvml> nvml_;                            // used on gpu_pool_ only after load
  std::vector<GpuSample> gpus_;                           // the latest sample
  bool ready_sent_ = false, notify_failed_ = false, save_failed_ = false, budget_stopped_ = false, exited_ = false;
};

}  // namespace

Result<std::vector<std::unique_ptr<supervisor::RunObserver>>> MakeTelemetryObservers(const config::JobConfig& job) {
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
  out.push_back(std::make_unique<TelemetryObserver>(job, std::move(endpoint), SdNotifier::FromEnvironment()));
  return out;
}

}  // namespace spotvisor::telemetry

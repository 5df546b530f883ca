// What the telemetry observer starts and writes (see telemetry_observer_impl.hpp): the
// metrics endpoint, the heartbeat and budget timers, instance facts, checkpoint records, the
// budget decision acted on, the report (through the writer passed in) and systemd's status line. io thread only.
#include "spotvisor/log/log.hpp"
#include "spotvisor/supervisor/budget.hpp"
#include "spotvisor/telemetry/notice_saves.hpp"
#include "spotvisor/telemetry/run_metrics.hpp"
#include "telemetry_observer_impl.hpp"

namespace spotvisor::telemetry {

using log::Log;
using log::LogLevel;
using log::Quote;
namespace {

namespace asio = boost::asio;

constexpr auto kHeartbeat = std::chrono::seconds(30);  // run.json refresh: billed time survives a SIGKILL

}  // namespace

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
  if (mirror_feed_) {
    v.mirrored = true;
    v.newest_durable = newest_durable_;
    v.durability = durability_;
    // The newest good checkpoint, while the mirror does not hold it yet.
    const CheckpointRecord* newest = nullptr;
    for (const auto& c : record_->ledger().checkpoints) {
      if (c.good && (!newest || c.step > newest->step)) newest = &c;
    }
    if (newest && (!newest_durable_ || newest->step > newest_durable_->first)) v.bytes_not_durable = newest->bytes;
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

}  // namespace spotvisor::telemetry

// The metric families; see run_metrics.hpp. Every family is always present (with 0 or an
// empty label set) so dashboards and alerts never see a family come and go, except the
// GPU families, which exist only when NVML answered.
#include "spotvisor/telemetry/run_metrics.hpp"

#include <cctype>
#include <cstdio>
#include <iterator>
#include <limits>

#include "spotvisor/telemetry/metrics_text.hpp"
#include "spotvisor/telemetry/notice_saves.hpp"

namespace spotvisor::telemetry {

std::string LabelName(const std::string& key) {
  std::string out;
  for (char c : key) out += std::isalnum(static_cast<unsigned char>(c)) || c == '_' ? c : '_';
  if (out.empty() || std::isdigit(static_cast<unsigned char>(out[0]))) out = "_" + out;
  return out;
}

namespace {

// Every notice to its save: outcomes of the settled ones, notice-to-saved times of those
// saved (judged good), the goodput buckets and the group.
void RenderNoticesAndGoodput(MetricsText& m, const LiveView& v) {
  const RunLedger& l = *v.ledger;
  std::map<std::string, int> outcomes{{"saved", 0}, {"saved-late", 0}, {"not-saved", 0}, {"no-deadline", 0}};
  static constexpr double kBounds[] = {1, 2, 5, 10, 15, 30, 60, 90, 120, 300};
  std::vector<int> le(std::size(kBounds), 0);
  int count = 0;
  double sum = 0;
  for (const auto& n : l.notices) {
    if (auto o = NoticeOutcome(n, false); o && !n.outcome.empty()) ++outcomes[*o];
    const auto saved = n.validated_ms ? AfterNotice(n, n.saved_ms) : std::nullopt;
    if (!saved) continue;
    ++count, sum += *saved;
    for (std::size_t i = 0; i < std::size(kBounds); ++i) le[i] += *saved <= kBounds[i] ? 1 : 0;
  }
  m.Family("spotvisor_notice_outcomes_total", "counter",
           "settled notices by outcome: saved (good checkpoint by the deadline), saved-late, not-saved, no-deadline");
  for (const auto& [outcome, n] : outcomes) m.Sample(n, {{"outcome", outcome}});
  m.Family("spotvisor_notice_to_saved_seconds", "histogram",
           "from a notice to its checkpoint's appearance (newest file's mtime), for saves judged good");
  for (std::size_t i = 0; i < std::size(kBounds); ++i) {
    char le_text[16];
    std::snprintf(le_text, sizeof le_text, "%g", kBounds[i]);
    m.Sample(le[i], {{"le", le_text}}, "_bucket");
  }
  m.Sample(count, {{"le", "+Inf"}}, "_bucket");
  m.Sample(sum, {}, "_sum");
  m.Sample(count, {}, "_count");
  const GoodputBuckets& b = v.summary->buckets;
  m.Family("spotvisor_goodput_seconds", "gauge", "billed time by goodput bucket (the buckets sum to the billed time)");
  for (const auto& [bucket, value] : std::vector<std::pair<const char*, double>>{{"productive", b.productive},
                                                                                 {"lost", b.lost},
                                                                                 {"checkpointing", b.checkpointing},
                                                                                 {"startup", b.startup},
                                                                                 {"disrupted", b.disrupted},
                                                                                 {"waiting", b.waiting},
                                                                                 {"idle", b.idle}}) {
    m.Sample(value, {{"bucket", bucket}});
  }
  m.Family("spotvisor_group_members", "gauge", "members of the job's group now (1 on a single node)");
  m.Sample(v.group_members);
  m.Family("spotvisor_group_nodes", "gauge", "the group's size, coordination.nodes (1 on a single node)");
  m.Sample(v.group_nodes);
}

// The mirror's side: what outlives the machine, and whether a notice's save would.
void RenderDurability(MetricsText& m, const LiveView& v) {
  m.Family("spotvisor_durable_newest_step", "gauge",
           "step of the newest checkpoint on the mirror (-1: none yet, or no mirror)");
  m.Sample(v.newest_durable ? static_cast<double>(v.newest_durable->first) : -1);
  m.Family("spotvisor_durable_newest_age_seconds", "gauge",
           "since the newest checkpoint reached the mirror (-1: none yet, or no mirror)");
  m.Sample(v.newest_durable ? (v.now_ms - v.newest_durable->second) / 1000.0 : -1);
  m.Family("spotvisor_durable_pending_bytes", "gauge",
           "bytes of the newest good checkpoint while it is not on the mirror yet (0: it is, or no mirror)");
  m.Sample(static_cast<double>(v.bytes_not_durable));
  m.Family("spotvisor_durability_fits", "gauge",
           "1: save + upload fits the provider's warning window, 0: it does not (durability_at_risk), -1: unknown");
  m.Sample(v.durability ? (v.durability->fits() ? 1 : 0) : -1);
  m.Family("spotvisor_durability_margin_seconds", "gauge",
           "warning window - save - upload at the measured rate (negative: at risk; 0 while unknown)");
  m.Sample(v.durability ? std::chrono::duration<double>(v.durability->margin).count() : 0);
}

}  // namespace

std::string RenderRunMetrics(const LiveView& v) {
  const RunLedger& l = *v.ledger;
  const RunSummary& s = *v.summary;
  MetricsText m;
  m.Family("spotvisor_up", "gauge", "1 while the supervisor runs");
  m.Sample(1);
  Labels info{{"job", l.job}, {"version", l.version}, {"config_hash", l.config_hash}};
  for (const auto& [k, value] : l.labels) info.push_back({"label_" + LabelName(k), value});
  m.Family("spotvisor_job_info", "gauge", "the job, its labels (job.labels) and spotvisor's version");
  m.Sample(1, info);
  m.Family("spotvisor_instance_info", "gauge", "the machine: provider, instance type, zone, region (empty = unknown)");
  m.Sample(1, {{"provider", l.host.provider},
               {"instance_type", l.host.instance_type},
               {"zone", l.host.zone},
               {"region", l.host.region}});
  m.Family("spotvisor_phase", "gauge", "1 for the supervisor's current phase");
  for (const char* p : {"idle", "selecting", "joining", "running", "deferred", "stopping", "backoff", "drained",
                        "finishing", "spare", "finished"}) {
    m.Sample(v.phase == p ? 1 : 0, {{"phase", p}});
  }
  m.Family("spotvisor_attempts_total", "counter", "trainer starts of this job, across supervisor restarts");
  m.Sample(static_cast<double>(s.attempt_count));
  m.Family("spotvisor_restarts_total", "counter", "restarts by the outcome of the attempt before them");
  for (const char* reason : {"failed", "hang", "preempted", "stopped", "spawn-failed", "peer-stopped"}) {
    const auto it = s.restarts.find(reason);
    m.Sample(it == s.restarts.end() ? 0 : it->second, {{"reason", reason}});
  }
  std::map<std::pair<std::string, std::string>, int> notices;
  for (const auto& n : l.notices) ++notices[{n.provider, n.kind}];
  m.Family("spotvisor_notices_total", "counter", "preemption notices and hints by provider and kind");
  for (const auto& [key, count] : notices) m.Sample(count, {{"provider", key.first}, {"kind", key.second}});
  m.Family("spotvisor_notice_to_signal_seconds", "gauge", "last notice: from receipt to the trainer's signal");
  m.Sample(v.last_notice_to_signal_seconds.value_or(0));
  m.Family("spotvisor_grace_used_seconds", "gauge", "last stop: from the stop signal to the trainer's end");
  m.Sample(v.last_grace_used_seconds.value_or(0));
  RenderNoticesAndGoodput(m, v);
  m.Family("spotvisor_checkpoints_total", "counter", "checkpoints judged, by verdict");
  m.Sample(l.checkpoint_totals.good, {{"verdict", "good"}});
  m.Sample(l.checkpoint_totals.corrupt, {{"verdict", "corrupt"}});
  m.Family("spotvisor_checkpoint_newest_good_step", "gauge", "step of the newest good checkpoint (-1: none)");
  m.Sample(s.final_step ? static_cast<double>(*s.final_step) : -1);
  std::int64_t newest_mtime = 0;
  for (const auto& c : l.checkpoints) {
    if (c.good) newest_mtime = std::max(newest_mtime, c.mtime_ms);
  }
  m.Family("spotvisor_checkpoint_newest_age_seconds", "gauge", "age of the newest good checkpoint seen (-1: none)");
  m.Sample(newest_mtime > 0 ? (v.now_ms - newest_mtime) / 1000.0 : -1);
  RenderDurability(m, v);
  m.Family("spotvisor_checkpoint_write_seconds_total", "counter",
           "measured checkpoint write time (statx birth to mtime)");
  m.Sample(s.checkpoint_write_seconds.value_or(0));
  m.Family("spotvisor_checkpoint_overhead_ratio", "gauge", "checkpoint write time / trainer time (-1: not measured)");
  m.Sample(s.checkpoint_overhead.value_or(-1));
  m.Family("spotvisor_trainer_uptime_seconds", "gauge", "how long the current trainer has run (0: none runs)");
  m.Sample(v.trainer_uptime_seconds.value_or(0));
  m.Family("spotvisor_goodput_ratio", "gauge", "useful trainer time / billed time (-1: unknown)");
  m.Sample(s.goodput.value_or(-1));
  m.Family("spotvisor_steps_per_second", "gauge", "throughput between checkpoints (-1: unknown)");
  m.Sample(s.steps_per_second.value_or(-1));
  m.Family("spotvisor_billed_seconds_total", "counter", "machine time billed so far (estimate)");
  m.Sample(s.billed_hours * 3600);
  m.Family("spotvisor_cost_estimate", "gauge",
           "cost so far: low end of the known components, high end of all (+Inf while a component is unknown)");
  m.Sample(s.cost.low, {{"bound", "low"}, {"currency", s.cost.currency}});
  m.Sample(s.cost.Upper().value_or(std::numeric_limits<double>::infinity()),
           {{"bound", "high"}, {"currency", s.cost.currency}});
  m.Family("spotvisor_cost_unknown_components", "gauge", "cost components without a price (never counted as 0)");
  m.Sample(static_cast<double>(s.cost.configured ? s.cost.unknown.size() : 1));
  m.Family("spotvisor_cost_budget", "gauge", "the cost budget (0: none)");
  m.Sample(l.cost.budget);
  m.Family("spotvisor_hook_runs_total", "counter", "hook runs by hook and outcome");
  for (const auto& [key, count] : v.hook_runs) m.Sample(count, {{"hook", key.first}, {"outcome", key.second}});
  m.Family("spotvisor_gpu_telemetry_available", "gauge", "1 when NVML answers");
  m.Sample(v.gpu_sampled ? 1 : 0);
  if (!v.gpus.empty()) {
    const auto each = [&](const char* name, const char* type, const char* help, auto value) {
      m.Family(name, type, help);
      for (const auto& g : v.gpus) m.Sample(value(g), {{"gpu", std::to_string(g.index)}, {"model", g.name}});
    };
    each("spotvisor_gpu_utilization_ratio", "gauge", "GPU busy fraction (NVML)",
         [](const GpuSample& g) { return g.utilization; });
    each("spotvisor_gpu_memory_used_bytes", "gauge", "GPU memory in use",
         [](const GpuSample& g) { return double(g.memory_used); });
    each("spotvisor_gpu_memory_capacity_bytes", "gauge", "GPU memory",
         [](const GpuSample& g) { return double(g.memory_total); });
    each("spotvisor_gpu_temperature_celsius", "gauge", "GPU temperature",
         [](const GpuSample& g) { return double(g.temperature_c); });
    m.Family("spotvisor_gpu_throttle", "gauge", "1 while NVML reports this clock throttle reason");
    for (const auto& g : v.gpus) {
      for (const auto& [bit, reason] : ThrottleReasons()) {
        m.Sample((g.throttle_reasons & bit) ? 1 : 0, {{"gpu", std::to_string(g.index)}, {"reason", reason}});
      }
    }
  }
  m.Family("spotvisor_gpu_peak_memory_used_bytes", "gauge", "largest GPU memory use seen on any device");
  m.Sample(static_cast<double>(l.gpu.peak_vram_bytes));
  return m.text();
}

}  // namespace spotvisor::telemetry

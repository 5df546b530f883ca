// The run report: JSON built from the state dir and written beside its Markdown (rendered
// from the JSON, so the two never disagree), at a run's end or by `spotvisor report`.
#include "spotvisor/report/report.hpp"

#include <cmath>
#include <nlohmann/json.hpp>

#include "spotvisor/config/job_config.hpp"
#include "spotvisor/cost/cost_model.hpp"
#include "spotvisor/log/log.hpp"
#include "spotvisor/preemption/time_format.hpp"
#include "spotvisor/state/journal.hpp"
#include "spotvisor/telemetry/json_opt.hpp"
#include "spotvisor/telemetry/notice_saves.hpp"
#include "spotvisor/telemetry/run_summary.hpp"
#include "spotvisor/util/atomic_file.hpp"
#include "spotvisor/util/units.hpp"

namespace spotvisor::report {

using log::Log;
using log::LogLevel;
using log::Quote;
// What telemetry recorded during the run (run.json) and what it makes of it.
using telemetry::AfterNotice;
using telemetry::GoodputBuckets;
using telemetry::NoticeOutcome;
using telemetry::NoticeRecord;
using telemetry::OptJson;
using telemetry::RunLedger;
using telemetry::RunSummary;
using telemetry::SessionRecord;
using telemetry::StepsLostOnANewVm;
using telemetry::Summarize;
namespace {

using nlohmann::json;

std::string Iso(std::int64_t ms) {
  return ms <= 0 ? "" : preemption::FormatIso8601(preemption::TimePoint(std::chrono::milliseconds(ms)));
}

double Round(double v, int digits) {
  const double f = std::pow(10.0, digits);
  return std::round(v * f) / f;
}

json Measurement() {
  return json::array({
      "billed time: wall time of spotvisor's sessions (from machine boot with cost.billing_from: boot), each at "
      "least cost.billing_minimum; the provider's invoice is the final word",
      "steps: read from checkpoint names (resume points and checkpoints seen); progress after the last checkpoint "
      "is not measured",
      "throughput: steps between consecutive good checkpoints of one attempt over their mtime difference",
      "steps lost (measured): a checkpoint reached but not resumed from (it was corrupt); steps lost (estimated): "
      "time from an interrupted attempt's last checkpoint to its end x throughput",
      "checkpoint write time: birth of the first file to modification of the last (statx); not measured on "
      "filesystems without birth times",
      "goodput: (trainer time - time lost - checkpoint write time) / billed time",
      "goodput buckets: billed time split into productive, lost (an interrupted attempt after its last good "
      "checkpoint), checkpointing (measured write time), startup (start to first progress), disrupted (a stop "
      "notice or its save, or a crash, to the next start), waiting (a group for its members), idle (the rest); "
      "priced at the compute price",
      "notices: saved = the attempt's first checkpoint written after the notice (newest file's mtime), validated "
      "= judged good, mirrored = uploaded; saved in window = judged good by the provider's deadline",
      "egress is never measured by spotvisor: it is the configured cost.egress_gb or unknown",
  });
}

// The node-seconds this node waited for its group before `r` started (after the attempt
// before it ended): the ledger's waiting intervals inside that gap.
double WaitedBefore(const RunLedger& l, std::int64_t after_ms, const state::AttemptRecord& r) {
  std::int64_t ms = 0;
  for (const auto& w : l.waiting) {
    const std::int64_t from = std::max(w.start_ms, after_ms), to = std::min(w.end_ms, r.started_ms);
    if (to > from) ms += to - from;
  }
  return ms / 1000.0;
}

json AttemptsJson(const RunLedger& l, const RunSummary& s) {
  json out = json::array();
  std::int64_t previous_end = 0;
  for (const auto& a : s.attempts) {
    const auto& r = a.record;
    const double waited = WaitedBefore(l, previous_end, r);
    previous_end = r.ended_ms;
    std::string status = r.signal      ? "signal " + std::to_string(*r.signal)
                         : r.exit_code ? "exit code " + std::to_string(*r.exit_code)
                                       : "";
    out.push_back(
        {{"attempt", r.attempt},
         {"start", Iso(r.started_ms)},
         {"end", a.running ? "" : Iso(r.ended_ms)},
         {"duration_s", Round((r.ended_ms - r.started_ms) / 1000.0, 3)},
         {"running", a.running},
         {"outcome", a.running ? "running" : r.outcome},
         {"next", r.next},
         {"status", status},
         {"resumed_from", OptJson(r.resume_from)},
         {"resume_step", OptJson(r.resume_step)},
         {"reached_step", OptJson(a.reached_step)},
         {"lost_seconds", Round(a.lost_seconds, 3)},
         {"steps_lost_measured", a.steps_lost_measured},
         {"slurm_restart_count", OptJson(r.slurm_restart_count)},
         {"stopped_by", OptJson(r.stopped_by)},
         {"epoch", OptJson(r.epoch)},
         {"nodes", OptJson(r.nodes)},
         {"waited_for_group_s", r.nodes && *r.nodes > 1 ? json(Round(waited, 3)) : json(nullptr)},
         {"steps_lost_estimated", a.steps_lost_estimated ? json(Round(*a.steps_lost_estimated, 1)) : json(nullptr)}});
  }
  return out;
}

json Seconds(std::optional<double> v) { return v ? json(Round(*v, 3)) : json(nullptr); }

// The estimated steps lost by `attempt` (an interrupted one), when it is still listed.
std::optional<double> StepsLost(const RunSummary& s, int attempt) {
  for (const auto& a : s.attempts) {
    if (a.record.attempt == attempt) return a.steps_lost_estimated;
  }
  return std::nullopt;
}

// With a mirror: the planner's prediction at the notice against what happened, and what a
// new VM resumes from (the newest checkpoint on the mirror at the deadline).
json DurabilityJson(const NoticeRecord& n) {
  json d;
  d["predicted_after_s"] = n.predicted_durable_ms ? json(Round(*n.predicted_durable_ms / 1000.0, 3)) : json(nullptr);
  d["predicted_in_window"] = n.predicted_durable_ms && n.deadline_ms
                                 ? json(n.received_ms + *n.predicted_durable_ms <= *n.deadline_ms)
                                 : json(nullptr);
  d["observed_after_s"] = Seconds(AfterNotice(n, n.mirrored_ms));
  d["observed_in_window"] = n.deadline_ms ? json(n.mirrored_ms && *n.mirrored_ms <= *n.deadline_ms) : json(nullptr);
  d["new_vm_resumes_from_step"] = OptJson(n.durable_step);
  d["steps_lost_on_a_new_vm"] = OptJson(StepsLostOnANewVm(n));
  return d;
}

json NoticesJson(const RunLedger& l, const RunSummary& s) {
  json out = json::array();
  for (const auto& n : l.notices) {
    json item{{"received", Iso(n.received_ms)},
              {"provider", n.provider},
              {"kind", n.kind},
              {"action", n.action},
              {"attempt", n.attempt}};
    item["warning_s"] = n.deadline_ms ? json(Round((*n.deadline_ms - n.received_ms) / 1000.0, 3)) : json(nullptr);
    item["notice_to_signal_s"] = n.signal_ms ? json(Round((*n.signal_ms - n.received_ms) / 1000.0, 3)) : json(nullptr);
    item["signal_after_s"] = Seconds(AfterNotice(n, n.signal_ms));
    item["saved_after_s"] = Seconds(AfterNotice(n, n.saved_ms));
    item["validated_after_s"] = Seconds(AfterNotice(n, n.validated_ms));
    item["mirrored_after_s"] = Seconds(AfterNotice(n, n.mirrored_ms));
    item["deadline_margin_s"] =
        n.deadline_ms && n.validated_ms ? json(Round((*n.deadline_ms - *n.validated_ms) / 1000.0, 3)) : json(nullptr);
    const auto outcome = NoticeOutcome(n, true);  // a report's notices are over, or as good as
    item["outcome"] = *outcome;
    item["checkpoint"] = n.checkpoint.empty() ? json(nullptr) : json(n.checkpoint);
    item["step"] = OptJson(n.step);
    auto lost = *outcome == "not-saved" ? StepsLost(s, n.attempt) : std::nullopt;
    if (*outcome == "not-saved" && n.steps_lost) lost = static_cast<double>(*n.steps_lost);  // measured
    item["steps_lost"] = lost ? json(Round(*lost, 1)) : json(nullptr);
    if (n.mirror) item["durability"] = DurabilityJson(n);
    out.push_back(item);
  }
  return out;
}

json SaveOnNotice(const RunLedger& l) {
  int saved = 0;
  for (const auto& n : l.notices) saved += NoticeOutcome(n, true) == "saved" ? 1 : 0;
  return {{"notices", l.notices.size()}, {"saved_in_window", saved}};
}

const std::vector<std::pair<const char*, double GoodputBuckets::*>>& BucketFields() {
  static const std::vector<std::pair<const char*, double GoodputBuckets::*>> fields{
      {"productive", &GoodputBuckets::productive},
      {"lost", &GoodputBuckets::lost},
      {"checkpointing", &GoodputBuckets::checkpointing},
      {"startup", &GoodputBuckets::startup},
      {"disrupted", &GoodputBuckets::disrupted},
      {"waiting", &GoodputBuckets::waiting},
      {"idle", &GoodputBuckets::idle}};
  return fields;
}

// Each bucket priced at the machine time's price (the compute component); other
// components are not split by time. Null while that price is unknown.
json GoodputJson(const RunLedger& l, const RunSummary& s) {
  json g{{"billed_s", Round(s.billed_seconds, 3)},
         {"first_progress_from", l.first_progress_from.empty() ? "first_checkpoint" : l.first_progress_from}};
  json buckets = json::object();
  for (const auto& [name, field] : BucketFields()) buckets[std::string(name) + "_s"] = Round(s.buckets.*field, 3);
  g["buckets"] = buckets;
  const auto hourly = cost::EstimateCost(l.cost, cost::Usage{1.0, 0.0});
  const cost::Component* compute = nullptr;
  for (const auto& c : hourly.components) compute = c.name == "compute" && c.known ? &c : compute;
  g["cost"] = nullptr;
  if (l.cost.configured && compute) {
    json costs = json::object();
    for (const auto& [name, field] : BucketFields()) {
      const double hours = s.buckets.*field / 3600.0;
      costs[name] = {{"low", Round(hours * compute->low, 4)},
                     {"high", compute->bounded ? json(Round(hours * compute->high, 4)) : json(nullptr)}};
    }
    g["cost"] = costs;
  }
  return g;
}

}  // namespace

Result<json> BuildReport(const std::filesystem::path& state_dir, std::int64_t now_ms) {
  auto ledger = RunLedger::Load(state_dir);
  if (!ledger) return ledger.error();
  auto journal = state::Journal::Open(state_dir);
  if (!journal) return journal.error();
  const auto attempts = journal->ReadAttempts();
  if (ledger->sessions.empty() && attempts.empty()) {
    return Error{state_dir.string() +
                 " holds no run (no run.json and no attempts.jsonl); pass a job's telemetry.state_dir"};
  }
  const RunLedger& l = *ledger;
  const RunSummary s = Summarize(l, attempts, now_ms);
  json r{{"report_version", 2}, {"generated_at", Iso(now_ms)},  {"job", l.job.empty() ? journal->state().job : l.job},
         {"labels", l.labels},  {"config_hash", l.config_hash}, {"spotvisor_version", l.version}};
  r["fingerprints"] = json::array();
  for (const auto& f : l.fingerprints) {
    r["fingerprints"].push_back({{"path", f.path}, {"hash", f.hash}, {"bytes", f.bytes}, {"error", f.error}});
  }
  r["host"] = {{"hostname", l.host.hostname}, {"provider", l.host.provider}, {"instance_type", l.host.instance_type},
               {"zone", l.host.zone},         {"region", l.host.region},     {"source", l.host.source}};
  r["gpu"] = {{"available", l.gpu.available},
              {"reason", l.gpu.reason},
              {"driver", l.gpu.driver},
              {"models", l.gpu.models},
              {"memory_total_bytes", l.gpu.memory_total_bytes},
              {"peak_vram_bytes", l.gpu.available ? json(l.gpu.peak_vram_bytes) : json(nullptr)}};
  r["start"] = Iso(s.first_start_ms);
  r["stop"] = Iso(s.last_end_ms);
  const auto& last_session = l.sessions.empty() ? SessionRecord{} : l.sessions.back();
  r["result"] = {
      {"exit_code", OptJson(last_session.exit_code)},
      {"message", last_session.exit_message.empty() ? journal->state().last_exit_message : last_session.exit_message},
      {"phase", journal->state().phase},
      {"sessions", l.sessions.size()}};
  r["attempts"] = AttemptsJson(l, s);
  r["restarts"] = s.restarts;
  r["notices"] = NoticesJson(l, s);
  r["save_on_notice"] = SaveOnNotice(l);
  const auto& t = l.checkpoint_totals;
  r["checkpoints"] = {
      {"count", t.good + t.corrupt},
      {"good", t.good},
      {"corrupt", t.corrupt},
      {"bytes_total", t.bytes},
      {"bytes_mean", t.good > 0 ? t.bytes / static_cast<std::uint64_t>(t.good) : 0},
      {"write_seconds_total", OptJson(s.checkpoint_write_seconds)},
      {"write_measured", t.write_measured},
      {"overhead_percent", s.checkpoint_overhead ? json(Round(*s.checkpoint_overhead * 100, 2)) : json(nullptr)},
      {"newest_good_step", OptJson(s.final_step)}};
  r["work"] = {
      {"initial_step", s.initial_step},
      {"final_step", OptJson(s.final_step)},
      {"steps_done", s.steps_done},
      {"steps_lost_measured", s.steps_lost_measured},
      {"steps_lost_estimated", s.steps_lost_estimated ? json(Round(*s.steps_lost_estimated, 1)) : json(nullptr)},
      {"lost_seconds", Round(s.lost_seconds, 3)},
      {"steps_per_second", s.steps_per_second ? json(Round(*s.steps_per_second, 4)) : json(nullptr)},
      {"trainer_seconds", Round(s.trainer_seconds, 3)},
      {"billed_hours", Round(s.billed_hours, 6)},
      {"calendar_hours", Round(s.calendar_hours, 6)},
      {"goodput", s.goodput ? json(Round(*s.goodput, 4)) : json(nullptr)}};
  r["goodput"] = GoodputJson(l, s);
  json cost = cost::EstimateToJson(s.cost);
  cost["per_1000_steps"] = s.cost_per_1000_steps
                               ? json{{"low", s.cost_per_1000_steps->first},
                                      {"high", s.cost.Upper() ? json(s.cost_per_1000_steps->second) : json(nullptr)}}
                               : json(nullptr);
  cost["budget"] = l.cost.budget > 0 ? json(l.cost.budget) : json(nullptr);
  cost["budget_warned"] = Iso(l.budget_warned_ms.value_or(0));
  cost["budget_exhausted"] = Iso(l.budget_exhausted_ms.value_or(0));
  r["cost"] = cost;
  r["hooks"] = {{"failures", l.hook_failures}, {"runs", json::array()}};
  for (const auto& h : l.hooks) {
    r["hooks"]["runs"].push_back({{"hook", h.hook},
                                  {"outcome", h.outcome},
                                  {"message", h.message},
                                  {"start", Iso(h.started_ms)},
                                  {"duration_ms", h.duration_ms}});
  }
  r["timeline"] = BuildTimeline(l, attempts, now_ms);
  r["measurement"] = Measurement();
  return r;
}

Result<std::filesystem::path> WriteReport(const json& report, const std::filesystem::path& state_dir,
                                          const std::optional<std::filesystem::path>& path) {
  std::filesystem::path md = path.value_or(state_dir / "report.md");
  std::filesystem::path js = md;
  js.replace_extension(".json");
  if (js == md) md.replace_extension(".md");
  std::error_code ec;
  std::filesystem::create_directories(md.parent_path(), ec);
  if (Status s = WriteFileAtomically(js, report.dump(2) + "\n"); !s) return s.error();
  if (Status s = WriteFileAtomically(md, RenderMarkdown(report)); !s) return s.error();
  return md;
}

std::optional<std::filesystem::path> WriteRunReport(const config::JobConfig& job, std::int64_t now_ms) {
  auto report = BuildReport(job.telemetry.state_dir, now_ms);
  if (!report) {
    Log(LogLevel::kError, "event=report_failed error=" + Quote(report.error().message));
    return std::nullopt;
  }
  auto path = WriteReport(*report, job.telemetry.state_dir, job.telemetry.report_path);
  if (!path) {
    Log(LogLevel::kError, "event=report_failed error=" + Quote(path.error().message));
    return std::nullopt;
  }
  Log(LogLevel::kInfo, "event=report_written path=" + Quote(path->string()) +
                           " cost=" + Quote((*report)["cost"]["total_text"].get<std::string>()));
  return *path;
}

}  // namespace spotvisor::report

// The run's arithmetic; see run_summary.hpp. Every figure is either measured (billed time,
// checkpoints and their steps, attempt times) or derived from measured figures in a way
// the report states (steps lost = lost time x throughput).
#include "spotvisor/telemetry/run_summary.hpp"

#include <algorithm>
#include <cstdlib>

namespace spotvisor::telemetry {
namespace {

constexpr std::int64_t kSameBootToleranceMs = 5000;

struct Interval {
  std::int64_t start = 0, end = 0;
};

// Billing intervals: a session on its own, or (billing from boot) every session of one
// boot merged into [boot, last end], since the machine ran in between.
std::vector<Interval> BillingIntervals(const RunLedger& l, std::int64_t now_ms) {
  std::vector<Interval> out;
  for (const auto& s : l.sessions) {
    const std::int64_t end = std::max(s.ended_ms.value_or(s.last_seen_ms == 0 ? now_ms : s.last_seen_ms), s.started_ms);
    if (l.cost.bill_from_boot && s.boot_ms && !out.empty() &&
        std::llabs(out.back().start - std::min(*s.boot_ms, s.started_ms)) <= kSameBootToleranceMs) {
      out.back().end = std::max(out.back().end, end);
      continue;
    }
    const std::int64_t start = l.cost.bill_from_boot && s.boot_ms ? std::min(*s.boot_ms, s.started_ms) : s.started_ms;
    out.push_back({start, end});
  }
  return out;
}

}  // namespace

RunSummary Summarize(const RunLedger& l, const std::vector<state::AttemptRecord>& journaled, std::int64_t now_ms,
                     const std::optional<state::AttemptRecord>& running) {
  RunSummary r;
  const auto intervals = BillingIntervals(l, now_ms);
  std::vector<double> seconds;
  for (const auto& i : intervals) seconds.push_back((i.end - i.start) / 1000.0);
  r.billed_hours = cost::BilledHours(seconds, l.cost.billing_minimum);
  if (!intervals.empty()) {
    r.first_start_ms = intervals.front().start;
    for (const auto& i : intervals) r.last_end_ms = std::max(r.last_end_ms, i.end);
    r.calendar_hours = (r.last_end_ms - r.first_start_ms) / 3600000.0;
  }

  std::vector<state::AttemptRecord> attempts = journaled;
  if (running) {
    attempts.push_back(*running);
    attempts.back().ended_ms = now_ms;
  }
  // Good checkpoints by attempt, in step order, for reached steps and throughput.
  std::map<int, std::vector<const CheckpointRecord*>> by_attempt;
  for (const auto& c : l.checkpoints) {
    if (!c.good) continue;
    by_attempt[c.attempt].push_back(&c);
    r.final_step = std::max(r.final_step.value_or(0), c.step);
  }
  double step_sum = 0, time_sum = 0;
  for (auto& [attempt, list] : by_attempt) {
    std::sort(list.begin(), list.end(), [](auto* a, auto* b) { return a->step < b->step; });
    if (attempt == 0) continue;  // seen before this run: no timing of ours
    for (std::size_t i = 1; i < list.size(); ++i) {
      const double dt = (list[i]->mtime_ms - list[i - 1]->mtime_ms) / 1000.0;
      if (dt > 0) step_sum += static_cast<double>(list[i]->step - list[i - 1]->step), time_sum += dt;
    }
  }
  if (time_sum > 0 && step_sum > 0) r.steps_per_second = step_sum / time_sum;
  if (!attempts.empty() && attempts.front().resume_step) r.initial_step = *attempts.front().resume_step;

  for (std::size_t i = 0; i < attempts.size(); ++i) {
    AttemptSummary a;
    a.record = attempts[i];
    a.running = running && i + 1 == attempts.size();
    const auto& rec = a.record;
    if (rec.resume_step) r.final_step = std::max(r.final_step.value_or(0), *rec.resume_step);
    r.trainer_seconds += std::max<std::int64_t>(0, rec.ended_ms - rec.started_ms) / 1000.0;
    std::int64_t last_progress_ms = rec.started_ms;
    if (auto it = by_attempt.find(rec.attempt); it != by_attempt.end() && !it->second.empty()) {
      a.reached_step = it->second.back()->step;
      for (const auto* c : it->second) last_progress_ms = std::max(last_progress_ms, std::min(c->mtime_ms, rec.ended_ms));
    }
    if (i + 1 < attempts.size()) {
      ++r.restarts[rec.outcome.empty() ? "unknown" : rec.outcome];
      const auto next_resume = attempts[i + 1].resume_step.value_or(0);
      if (a.reached_step && *a.reached_step > next_resume) a.steps_lost_measured = *a.reached_step - next_resume;
    }
    if (rec.outcome != "done" && !a.running) a.lost_seconds = std::max<std::int64_t>(0, rec.ended_ms - last_progress_ms) / 1000.0;
    if (r.steps_per_second) a.steps_lost_estimated = a.lost_seconds * *r.steps_per_second;
    r.lost_seconds += a.lost_seconds;
    r.steps_lost_measured += a.steps_lost_measured;
    r.attempts.push_back(a);
  }
  if (r.steps_per_second) r.steps_lost_estimated = r.lost_seconds * *r.steps_per_second;
  if (r.final_step && *r.final_step > r.initial_step) r.steps_done = *r.final_step - r.initial_step;

  if (l.checkpoint_totals.write_measured > 0) {
    r.checkpoint_write_seconds = l.checkpoint_totals.write_ms / 1000.0;
    if (r.trainer_seconds > 0) r.checkpoint_overhead = *r.checkpoint_write_seconds / r.trainer_seconds;
  }
  const double billed_seconds = r.billed_hours * 3600.0;
  if (billed_seconds > 0) {
    const double useful = r.trainer_seconds - r.lost_seconds - r.checkpoint_write_seconds.value_or(0);
    r.goodput = std::clamp(useful / billed_seconds, 0.0, 1.0);
  }
  r.cost = cost::EstimateCost(l.cost, cost::Usage{r.billed_hours, r.calendar_hours});
  r.cost_per_1000_steps = cost::PerThousand(r.cost, static_cast<double>(r.steps_done));
  return r;
}

}  // namespace spotvisor::telemetry

// The run's arithmetic; see run_summary.hpp. Every figure is either measured (billed time,
// checkpoints and their steps, attempt times) or derived from measured figures in a way
// the report states (steps lost = lost time x throughput).
#include "spotvisor/telemetry/run_summary.hpp"

#include <algorithm>
#include <cstdlib>

#include "goodput_buckets.hpp"

namespace spotvisor::telemetry {
namespace {

using ByAttempt = std::map<int, std::vector<const CheckpointRecord*>>;

// Good checkpoints by the attempt that wrote them, in step order.
ByAttempt GoodCheckpointsByAttempt(const RunLedger& l) {
  ByAttempt by_attempt;
  for (const auto& c : l.checkpoints) {
    if (c.good) by_attempt[c.attempt].push_back(&c);
  }
  for (auto& [attempt, list] : by_attempt) {
    std::sort(list.begin(), list.end(), [](auto* a, auto* b) { return a->step < b->step; });
  }
  return by_attempt;
}

// One attempt's own figures; `next` is the attempt that followed it (none for the last).
AttemptSummary SummarizeAttempt(const RunLedger& l, const state::AttemptRecord& rec, const ByAttempt& by_attempt,
                                const state::AttemptRecord* next, bool running) {
  AttemptSummary a;
  a.record = rec;
  a.running = running;
  a.trainer_seconds = std::max<std::int64_t>(0, rec.ended_ms - rec.started_ms) / 1000.0;
  std::int64_t last_progress_ms = rec.started_ms;
  if (auto it = by_attempt.find(rec.attempt); it != by_attempt.end() && !it->second.empty()) {
    a.reached_step = it->second.back()->step;
    for (const auto* c : it->second) last_progress_ms = std::max(last_progress_ms, std::min(c->mtime_ms, rec.ended_ms));
  }
  if (next) {
    const auto next_resume = next->resume_step.value_or(0);
    if (a.reached_step && *a.reached_step > next_resume) a.steps_lost_measured = *a.reached_step - next_resume;
  }
  if (rec.outcome != "done" && !running)
    a.lost_seconds = std::max<std::int64_t>(0, rec.ended_ms - last_progress_ms) / 1000.0;
  a.buckets = AttemptBuckets(l, rec, running);
  return a;
}

}  // namespace

void FoldOldest(const RunLedger& l, std::vector<state::AttemptRecord>& attempts, FoldedAttempts& folded,
                std::size_t keep) {
  keep = std::max<std::size_t>(keep, 1);  // the newest stays: folding needs the attempt after
  if (attempts.size() <= keep) return;
  const auto by_attempt = GoodCheckpointsByAttempt(l);
  const auto billing = BillingIntervals(l, attempts.back().ended_ms);
  const std::size_t n = attempts.size() - keep;
  for (std::size_t i = 0; i < n; ++i) {
    const auto a = SummarizeAttempt(l, attempts[i], by_attempt, &attempts[i + 1], false);
    folded.buckets += a.buckets;
    folded.buckets.disrupted += DisruptedGapSeconds(l, attempts[i], attempts[i + 1].started_ms, billing);
    if (folded.count == 0) folded.first_resume_step = a.record.resume_step;
    ++folded.count;
    for (const auto step : {a.record.resume_step, a.reached_step}) {
      if (step) folded.newest_step = std::max(folded.newest_step.value_or(0), *step);
    }
    ++folded.restarts[a.record.outcome.empty() ? "unknown" : a.record.outcome];
    folded.trainer_seconds += a.trainer_seconds;
    folded.lost_seconds += a.lost_seconds;
    folded.steps_lost_measured += a.steps_lost_measured;
  }
  attempts.erase(attempts.begin(), attempts.begin() + static_cast<std::ptrdiff_t>(n));
}

RunSummary Summarize(const RunLedger& l, const std::vector<state::AttemptRecord>& journaled, std::int64_t now_ms,
                     const std::optional<state::AttemptRecord>& running, const FoldedAttempts& folded) {
  RunSummary r;
  const auto intervals = BillingIntervals(l, now_ms);
  std::vector<double> seconds;
  for (const auto& i : intervals) seconds.push_back((i.end_ms - i.start_ms) / 1000.0);
  r.billed_hours = cost::BilledHours(seconds, l.cost.billing_minimum);
  if (!intervals.empty()) {
    r.first_start_ms = intervals.front().start_ms;
    for (const auto& i : intervals) r.last_end_ms = std::max(r.last_end_ms, i.end_ms);
    r.calendar_hours = (r.last_end_ms - r.first_start_ms) / 3600000.0;
  }

  std::vector<state::AttemptRecord> attempts = journaled;
  if (running) {
    attempts.push_back(*running);
    attempts.back().ended_ms = now_ms;
  }
  const auto by_attempt = GoodCheckpointsByAttempt(l);
  double step_sum = 0, time_sum = 0;
  for (const auto& [attempt, list] : by_attempt) {
    r.final_step = std::max(r.final_step.value_or(0), list.back()->step);
    if (attempt == 0) continue;  // seen before this run: no timing of ours
    for (std::size_t i = 1; i < list.size(); ++i) {
      const double dt = (list[i]->mtime_ms - list[i - 1]->mtime_ms) / 1000.0;
      if (dt > 0) step_sum += static_cast<double>(list[i]->step - list[i - 1]->step), time_sum += dt;
    }
  }
  if (time_sum > 0 && step_sum > 0) r.steps_per_second = step_sum / time_sum;

  r.attempt_count = folded.count + static_cast<int>(attempts.size());
  r.trainer_seconds = folded.trainer_seconds;
  r.buckets = folded.buckets;
  r.lost_seconds = folded.lost_seconds;
  r.steps_lost_measured = folded.steps_lost_measured;
  r.restarts = folded.restarts;
  if (folded.newest_step) r.final_step = std::max(r.final_step.value_or(0), *folded.newest_step);
  if (folded.count > 0) {
    r.initial_step = folded.first_resume_step.value_or(0);
  } else if (!attempts.empty() && attempts.front().resume_step) {
    r.initial_step = *attempts.front().resume_step;
  }
  for (std::size_t i = 0; i < attempts.size(); ++i) {
    const bool last = i + 1 == attempts.size();
    AttemptSummary a = SummarizeAttempt(l, attempts[i], by_attempt, last ? nullptr : &attempts[i + 1], running && last);
    r.buckets += a.buckets;
    const bool ended = !(running && last);
    // The gap after it: to the next start, or (the last, ended) to the run's end.
    if (ended)
      r.buckets.disrupted +=
          DisruptedGapSeconds(l, a.record, last ? r.last_end_ms : attempts[i + 1].started_ms, intervals);
    if (a.record.resume_step) r.final_step = std::max(r.final_step.value_or(0), *a.record.resume_step);
    if (!last) ++r.restarts[a.record.outcome.empty() ? "unknown" : a.record.outcome];
    if (r.steps_per_second) a.steps_lost_estimated = a.lost_seconds * *r.steps_per_second;
    r.trainer_seconds += a.trainer_seconds;
    r.lost_seconds += a.lost_seconds;
    r.steps_lost_measured += a.steps_lost_measured;
    r.attempts.push_back(std::move(a));
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
  r.billed_seconds = billed_seconds;
  CloseBuckets(r.buckets, l, intervals, billed_seconds);
  r.cost = cost::EstimateCost(l.cost, cost::Usage{r.billed_hours, r.calendar_hours});
  r.cost_per_1000_steps = cost::PerThousand(r.cost, static_cast<double>(r.steps_done));
  return r;
}

}  // namespace spotvisor::telemetry

// Goodput buckets; see goodput_buckets.hpp. Every figure is a measured time: attempt
// starts and ends (journal), first progress (heartbeat, progress line or first checkpoint),
// checkpoint mtimes and write times (statx), notices, the group's waiting, billed sessions.
#include "goodput_buckets.hpp"

#include <algorithm>
#include <cstdlib>

namespace spotvisor::telemetry {
namespace {

constexpr std::int64_t kSameBootToleranceMs = 5000;

double Sec(std::int64_t ms) { return static_cast<double>(std::max<std::int64_t>(ms, 0)) / 1000.0; }

// Where training began: the recorded first progress, else the attempt's first good
// checkpoint beyond its resume step; nullopt when neither is known.
std::optional<std::int64_t> FirstProgress(const RunLedger& l, const state::AttemptRecord& a) {
  if (auto it = l.first_progress_ms.find(a.attempt); it != l.first_progress_ms.end()) return it->second;
  std::optional<std::int64_t> first;
  for (const auto& c : l.checkpoints) {
    if (c.attempt == a.attempt && c.good && c.step > a.resume_step.value_or(0)) {
      first = std::min(first.value_or(c.mtime_ms), c.mtime_ms);
    }
  }
  return first;
}

}  // namespace

double GoodputBuckets::Sum() const { return productive + lost + checkpointing + startup + disrupted + waiting + idle; }

std::vector<Interval> BillingIntervals(const RunLedger& l, std::int64_t now_ms) {
  std::vector<Interval> out;
  for (const auto& s : l.sessions) {
    const std::int64_t end = std::max(s.ended_ms.value_or(s.last_seen_ms == 0 ? now_ms : s.last_seen_ms), s.started_ms);
    if (l.cost.bill_from_boot && s.boot_ms && !out.empty() &&
        std::llabs(out.back().start_ms - std::min(*s.boot_ms, s.started_ms)) <= kSameBootToleranceMs) {
      out.back().end_ms = std::max(out.back().end_ms, end);
      continue;
    }
    const std::int64_t start = l.cost.bill_from_boot && s.boot_ms ? std::min(*s.boot_ms, s.started_ms) : s.started_ms;
    out.push_back({start, end});
  }
  return out;
}

std::int64_t OverlapMs(std::int64_t start, std::int64_t end, const std::vector<Interval>& intervals) {
  std::int64_t sum = 0;
  for (const auto& i : intervals)
    sum += std::max<std::int64_t>(0, std::min(end, i.end_ms) - std::max(start, i.start_ms));
  return sum;
}

GoodputBuckets AttemptBuckets(const RunLedger& l, const state::AttemptRecord& a, bool running) {
  GoodputBuckets b;
  const std::int64_t start = a.started_ms, end = std::max(a.ended_ms, a.started_ms);
  const bool interrupted = !running && a.outcome != "done";
  const auto first = FirstProgress(l, a);
  // No progress signal: a running attempt is still starting; an ended one trained (and
  // lost it all when interrupted, as work.lost_seconds counts it).
  const std::int64_t trained_from = first ? std::clamp(*first, start, end) : (running ? end : start);
  std::int64_t kept = trained_from, write_ms = 0;
  for (const auto& c : l.checkpoints) {
    if (c.attempt != a.attempt) continue;
    if (c.write_ms) write_ms += *c.write_ms;
    if (c.good) kept = std::max(kept, std::min(c.mtime_ms, end));
  }
  std::int64_t disrupt_from = end;  // a stop notice: what follows it (or its save) is the disruption
  if (interrupted) {
    for (const auto& n : l.notices) {
      if (n.attempt != a.attempt || n.action != "stop" || n.received_ms < start) continue;
      disrupt_from = std::min(disrupt_from, std::max(n.received_ms, trained_from));
      // Its save (a file time a tick behind the clock reads as the signal's): kept from then.
      if (n.validated_ms && n.saved_ms) kept = std::max(kept, std::min(*n.saved_ms, end));
    }
  }
  b.startup = Sec(trained_from - start);
  if (interrupted) {
    b.lost = Sec(std::min(disrupt_from, end) - kept);
    b.disrupted = Sec(end - std::max(disrupt_from, kept));
  }
  const double training = Sec(end - start) - b.startup - b.lost - b.disrupted;
  b.checkpointing = std::clamp(Sec(write_ms), 0.0, std::max(training, 0.0));
  b.productive = std::max(training - b.checkpointing, 0.0);
  return b;
}

double DisruptedGapSeconds(const RunLedger& l, const state::AttemptRecord& ended, std::int64_t next_start_ms,
                           const std::vector<Interval>& billing) {
  if (ended.outcome == "done" || next_start_ms <= ended.ended_ms) return 0;
  const std::int64_t billed = OverlapMs(ended.ended_ms, next_start_ms, billing);
  std::int64_t waiting = 0;
  for (const auto& w : l.waiting) {
    waiting += OverlapMs(std::max(w.start_ms, ended.ended_ms), std::min(w.end_ms, next_start_ms), billing);
  }
  return Sec(billed - waiting);
}

void CloseBuckets(GoodputBuckets& b, const RunLedger& l, const std::vector<Interval>& billing, double billed_seconds) {
  std::int64_t waiting = 0;
  for (const auto& w : l.waiting) waiting += OverlapMs(w.start_ms, w.end_ms, billing);
  b.waiting = Sec(waiting);
  b.idle = 0;
  const double measured = b.Sum();
  if (measured > billed_seconds && measured > 0) {
    const double f = billed_seconds / measured;
    for (double* x : {&b.productive, &b.lost, &b.checkpointing, &b.startup, &b.disrupted, &b.waiting}) *x *= f;
  }
  b.idle = std::max(billed_seconds - b.Sum(), 0.0);
}

}  // namespace spotvisor::telemetry

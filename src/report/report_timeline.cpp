// The report's `timeline`: what happened when, in unix ms, for the picture (report_html):
// machine sessions, one entry per attempt, the gaps between and inside them (stopping:
// notice to the trainer's exit; backoff: between attempts of one session; waiting: the
// supervisor up without a trainer, e.g. drained until the machine went away), notices with
// their deadlines, checkpoints with their verdicts and the step reached over time. Built
// from the ledger and the journal alone, like the rest of the report. Pure; any thread.
#include <algorithm>
#include <nlohmann/json.hpp>

#include "spotvisor/report/report.hpp"
#include "spotvisor/state/journal.hpp"
#include "spotvisor/telemetry/json_opt.hpp"
#include "spotvisor/telemetry/run_ledger.hpp"

namespace spotvisor::report {

using telemetry::CheckpointRecord;
using telemetry::OptJson;
using telemetry::RunLedger;
namespace {

using nlohmann::json;

struct Span {
  std::int64_t start = 0, end = 0;
};

std::vector<Span> Sessions(const RunLedger& l, std::int64_t now_ms) {
  std::vector<Span> out;
  for (const auto& s : l.sessions) {
    const std::int64_t end = s.ended_ms.value_or(s.last_seen_ms == 0 ? now_ms : s.last_seen_ms);
    out.push_back({s.started_ms, std::max(end, s.started_ms)});
  }
  return out;
}

// The session that holds `ms`, as an index; -1 when none does.
int SessionAt(const std::vector<Span>& sessions, std::int64_t ms) {
  for (std::size_t i = 0; i < sessions.size(); ++i) {
    if (sessions[i].start <= ms && ms <= sessions[i].end) return static_cast<int>(i);
  }
  return -1;
}

// good | corrupt (the watcher judged it bad while the run went on) | quarantined (rejected
// when a resume point was selected: moved aside when checkpoints.quarantine is on).
std::string Verdict(const CheckpointRecord& c) {
  if (c.good) return "good";
  return c.mtime_ms == 0 && c.bytes == 0 ? "quarantined" : "corrupt";
}

json Gap(const char* kind, std::int64_t start, std::int64_t end, int attempt) {
  return {{"kind", kind}, {"start_ms", start}, {"end_ms", end}, {"attempt", attempt}};
}

// Stopping inside each attempt (its notice to its end), backoff and waiting between them.
json Gaps(const RunLedger& l, const std::vector<state::AttemptRecord>& attempts, const std::vector<Span>& sessions) {
  json gaps = json::array();
  for (std::size_t i = 0; i < attempts.size(); ++i) {
    const auto& a = attempts[i];
    for (const auto& n : l.notices) {
      if (n.attempt == a.attempt && n.action == "stop" && n.received_ms >= a.started_ms && n.received_ms < a.ended_ms) {
        gaps.push_back(Gap("stopping", n.received_ms, a.ended_ms, a.attempt));
        break;
      }
    }
    const int here = SessionAt(sessions, a.ended_ms);
    if (i + 1 < attempts.size()) {
      const auto& next = attempts[i + 1];
      const int there = SessionAt(sessions, next.started_ms);
      if (here >= 0 && here == there) {
        if (next.started_ms > a.ended_ms) gaps.push_back(Gap("backoff", a.ended_ms, next.started_ms, a.attempt));
        continue;
      }
      if (there >= 0 && next.started_ms > sessions[there].start)
        gaps.push_back(Gap("waiting", sessions[there].start, next.started_ms, next.attempt));
    }
    if (here >= 0 && sessions[here].end > a.ended_ms)
      gaps.push_back(Gap("waiting", a.ended_ms, sessions[here].end, a.attempt));
  }
  if (!attempts.empty()) {  // before the first attempt: selection, preflight, group wait
    const int first = SessionAt(sessions, attempts.front().started_ms);
    if (first >= 0 && attempts.front().started_ms > sessions[first].start)
      gaps.push_back(Gap("waiting", sessions[first].start, attempts.front().started_ms, attempts.front().attempt));
  }
  return gaps;
}

json Steps(const RunLedger& l, const std::vector<state::AttemptRecord>& attempts) {
  std::vector<std::pair<std::int64_t, std::uint64_t>> points;
  for (const auto& a : attempts) points.emplace_back(a.started_ms, a.resume_step.value_or(0));
  for (const auto& c : l.checkpoints) {
    if (c.good && c.mtime_ms > 0 && c.attempt > 0) points.emplace_back(c.mtime_ms, c.step);
  }
  std::stable_sort(points.begin(), points.end(), [](auto& x, auto& y) { return x.first < y.first; });
  json out = json::array();
  for (const auto& [ms, step] : points) out.push_back({{"ms", ms}, {"step", step}});
  return out;
}

}  // namespace

json BuildTimeline(const RunLedger& l, const std::vector<state::AttemptRecord>& attempts, std::int64_t now_ms) {
  const auto sessions = Sessions(l, now_ms);
  json t{{"sessions", json::array()},
         {"attempts", json::array()},
         {"notices", json::array()},
         {"checkpoints", json::array()}};
  std::int64_t start = 0, end = 0;
  const auto widen = [&](std::int64_t a, std::int64_t b) {
    if (a <= 0) return;
    start = start == 0 ? a : std::min(start, a);
    end = std::max({end, a, b});
  };
  for (std::size_t i = 0; i < sessions.size(); ++i) {
    const auto& s = l.sessions[i];
    t["sessions"].push_back({{"start_ms", sessions[i].start},
                             {"end_ms", sessions[i].end},
                             {"open", !s.ended_ms.has_value()},
                             {"hostname", s.hostname},
                             {"exit_code", OptJson(s.exit_code)}});
    widen(sessions[i].start, sessions[i].end);
  }
  for (const auto& a : attempts) {
    t["attempts"].push_back({{"attempt", a.attempt},
                             {"start_ms", a.started_ms},
                             {"end_ms", a.ended_ms},
                             {"outcome", a.outcome},
                             {"resume_step", OptJson(a.resume_step)}});
    widen(a.started_ms, a.ended_ms);
  }
  for (const auto& n : l.notices) {
    t["notices"].push_back({{"received_ms", n.received_ms},
                            {"deadline_ms", OptJson(n.deadline_ms)},
                            {"signal_ms", OptJson(n.signal_ms)},
                            {"attempt", n.attempt},
                            {"provider", n.provider},
                            {"kind", n.kind},
                            {"action", n.action}});
    widen(n.received_ms, n.received_ms);  // not the deadline: a machine stopped before it ends the picture
  }
  for (const auto& c : l.checkpoints) {
    const std::string verdict = Verdict(c);
    t["checkpoints"].push_back({{"ms", c.seen_ms},
                                {"step", verdict == "quarantined" ? json(nullptr) : json(c.step)},
                                {"verdict", verdict},
                                {"name", c.name},
                                {"attempt", c.attempt},
                                {"reason", c.reason}});
    widen(c.seen_ms, c.seen_ms);
  }
  t["gaps"] = Gaps(l, attempts, sessions);
  t["steps"] = Steps(l, attempts);
  t["start_ms"] = start;
  t["end_ms"] = end;
  return t;
}

}  // namespace spotvisor::report

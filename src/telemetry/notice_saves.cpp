// Notices to their saves; see notice_saves.hpp.
#include "spotvisor/telemetry/notice_saves.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>

#include "spotvisor/log/log.hpp"

namespace spotvisor::telemetry {
namespace {

// File timestamps come from the kernel's coarse clock, a tick (up to 10 ms) behind the
// wall clock: a checkpoint written just after the notice may carry an mtime just before it.
constexpr std::int64_t kCoarseMs = 50;

std::string Num(std::optional<double> v) {
  if (!v) return "none";
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.3f", *v);
  return buf;
}

}  // namespace

std::optional<double> AfterNotice(const NoticeRecord& n, std::optional<std::int64_t> ms) {
  if (!ms) return std::nullopt;
  return std::round(static_cast<double>(*ms - n.received_ms)) / 1000.0;
}

namespace {

// The first good checkpoint after a notice may not be the one it stopped with: a periodic
// save that landed a moment before the notice (matched by the coarse rule), or one the
// trainer finished just after the signal before it saw its stop flag. For a stop notice the
// newest good checkpoint of its attempt is the one the drain names, the mirror uploads and
// the next start resumes from; for a checkpoint-only notice (a rebalance hint) the trainer
// runs on, so only a match from before its signal is replaced.
bool Revise(NoticeRecord& n, const CheckpointRecord& c) {
  if (!n.validated_ms || !c.good || n.attempt != c.attempt || c.step <= n.step.value_or(0)) return false;
  const bool before_signal = *n.saved_ms <= n.signal_ms.value_or(n.received_ms);
  if (n.action != "stop" && !before_signal) return false;
  log::Log(log::LogLevel::kInfo, "event=notice_checkpoint_revised provider=" + n.provider +
                                     " from=" + log::Quote(n.checkpoint) + " to=" + log::Quote(c.name) + " detail=" +
                                     log::Quote(before_signal ? "the first was written before the notice's signal"
                                                              : "a newer checkpoint of the stopped attempt"));
  n.saved_ms = std::max(c.mtime_ms, n.received_ms);
  n.checkpoint = c.name;
  n.step = c.step;
  n.validated_ms = std::max(c.seen_ms, *n.saved_ms);
  n.mirrored_ms.reset();
  n.outcome = *NoticeOutcome(n, true);
  return true;
}

}  // namespace

std::vector<std::size_t> MatchCheckpoint(RunLedger& l, const CheckpointRecord& c) {
  std::vector<std::size_t> settled;
  for (std::size_t i = 0; i < l.notices.size(); ++i) {
    auto& n = l.notices[i];
    if (Revise(n, c)) continue;
    // Written (its newest file) after the notice was seen, by the attempt the notice stopped.
    if (!n.outcome.empty() || n.validated_ms || n.attempt != c.attempt || c.mtime_ms < n.received_ms - kCoarseMs)
      continue;
    if (!c.good && n.saved_ms) continue;  // the first corrupt one says it appeared; keep it
    // Within a tick before the signal (or the notice): it appeared then, as far as the
    // filesystem's clock can tell.
    const std::int64_t asked = n.signal_ms.value_or(n.received_ms);
    n.saved_ms = c.mtime_ms < asked && c.mtime_ms >= asked - kCoarseMs ? asked : std::max(c.mtime_ms, n.received_ms);
    n.checkpoint = c.name;
    n.step = c.step;
    if (!c.good) continue;
    n.validated_ms = std::max(c.seen_ms, *n.saved_ms);
    n.outcome = *NoticeOutcome(n, true);
    settled.push_back(i);
  }
  return settled;
}

void MatchMirrored(RunLedger& l, const std::string& name, std::int64_t ms) {
  for (auto& n : l.notices) {
    if (n.validated_ms && n.checkpoint == name && !n.mirrored_ms) n.mirrored_ms = ms;
  }
}

void SettleDurable(RunLedger& l, const std::vector<DurableAt>& durable, std::optional<std::int64_t> now_ms) {
  for (auto& n : l.notices) {
    if (!n.mirror || n.durable_step) continue;
    if (now_ms && (!n.deadline_ms || *n.deadline_ms > *now_ms)) continue;
    for (const auto& d : durable) {
      if (n.deadline_ms && d.at_ms > *n.deadline_ms) continue;
      if (!n.durable_step || d.step > *n.durable_step) n.durable_step = d.step;
    }
  }
}

std::optional<std::uint64_t> StepsLostOnANewVm(const NoticeRecord& n) {
  if (!n.mirror || !n.step) return std::nullopt;
  if (n.mirrored_ms && (!n.deadline_ms || *n.mirrored_ms <= *n.deadline_ms)) return 0;
  const std::uint64_t from = n.durable_step.value_or(0);  // nothing on the mirror: from scratch
  return *n.step > from ? *n.step - from : 0;
}

std::vector<std::size_t> SettleOpen(RunLedger& l, std::optional<int> attempt) {
  std::vector<std::size_t> settled;
  for (std::size_t i = 0; i < l.notices.size(); ++i) {
    auto& n = l.notices[i];
    if (!n.outcome.empty() || (attempt && n.attempt >= *attempt)) continue;
    n.outcome = *NoticeOutcome(n, true);
    settled.push_back(i);
  }
  return settled;
}

std::string NoticeEventLine(const NoticeRecord& n, std::optional<double> steps_lost) {
  const bool saved = n.validated_ms.has_value();
  std::string line = std::string(saved ? "event=notice_saved" : "event=notice_not_saved") + " provider=" + n.provider +
                     " kind=" + n.kind + " attempt=" + std::to_string(n.attempt) +
                     " signal_after_s=" + Num(AfterNotice(n, n.signal_ms)) +
                     " saved_after_s=" + Num(AfterNotice(n, n.saved_ms)) +
                     " validated_after_s=" + Num(AfterNotice(n, n.validated_ms));
  std::string margin = "none";
  if (n.deadline_ms && n.validated_ms) margin = Num(static_cast<double>(*n.deadline_ms - *n.validated_ms) / 1000.0);
  line += " deadline_margin_s=" + margin + " outcome=" + n.outcome;
  line += " checkpoint=" + (n.checkpoint.empty() ? std::string("none") : log::Quote(n.checkpoint));
  if (!saved) line += " steps_lost=" + (steps_lost ? Num(std::round(*steps_lost)) : std::string("unknown"));
  return line;
}

}  // namespace spotvisor::telemetry

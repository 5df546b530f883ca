// Folding old attempts into totals (what a long-lived supervisor does to keep its memory
// flat) gives the same run figures as summarizing every attempt record.
#include <gtest/gtest.h>

#include "spotvisor/telemetry/run_summary.hpp"

namespace spotvisor::telemetry {
namespace {

constexpr std::int64_t kT0 = 1'700'000'000'000;  // unix ms
constexpr std::int64_t kSec = 1000;

// 300 attempts of 100 s each: every third writes two checkpoints and is preempted, the next
// resumes from its newest, except every fifth time, when the newest is found corrupt and
// the next resumes from the older one (steps lost, measured); the rest crash without one.
struct ScriptedRun {
  RunLedger ledger;
  std::vector<state::AttemptRecord> attempts;
};

ScriptedRun MakeRun() {
  ScriptedRun run;
  run.ledger.cost.configured = true;
  run.ledger.cost.node_hour = {true, 2.0, 3.0};
  SessionRecord s;
  s.started_ms = kT0;
  s.last_seen_ms = kT0;
  run.ledger.sessions.push_back(s);
  std::uint64_t good_step = 0;
  std::optional<std::uint64_t> resume;
  for (int i = 1; i <= 300; ++i) {
    state::AttemptRecord a;
    a.attempt = i;
    a.started_ms = kT0 + (i - 1) * 100 * kSec;
    a.ended_ms = a.started_ms + 90 * kSec;
    a.resume_step = resume;
    if (resume) a.resume_from = "/ckpt/ckpt_step" + std::to_string(*resume);
    a.outcome = "crashed";
    if (i % 3 == 0) {
      a.outcome = "preempted";
      std::uint64_t first = 0;
      for (int k = 1; k <= 2; ++k) {
        CheckpointRecord c;
        c.step = good_step + 10 * static_cast<std::uint64_t>(k);
        c.name = "ckpt_step" + std::to_string(c.step);
        c.mtime_ms = a.started_ms + k * 30 * kSec;
        c.write_ms = 2000;
        c.attempt = i;
        c.good = true;
        run.ledger.AddCheckpoint(c);
        if (k == 1) first = c.step;
      }
      // Every fifth time the newest turns out corrupt at resume: the older one is used.
      good_step = i % 5 == 0 ? first : first + 10;
      resume = good_step;
    }
    run.attempts.push_back(a);
  }
  return run;
}

void ExpectSameTotals(const RunSummary& all, const RunSummary& folded) {
  EXPECT_EQ(folded.attempt_count, all.attempt_count);
  EXPECT_DOUBLE_EQ(folded.trainer_seconds, all.trainer_seconds);
  EXPECT_DOUBLE_EQ(folded.lost_seconds, all.lost_seconds);
  EXPECT_EQ(folded.steps_lost_measured, all.steps_lost_measured);
  EXPECT_EQ(folded.restarts, all.restarts);
  EXPECT_EQ(folded.initial_step, all.initial_step);
  EXPECT_EQ(folded.final_step, all.final_step);
  EXPECT_EQ(folded.steps_done, all.steps_done);
  EXPECT_EQ(folded.steps_per_second, all.steps_per_second);
  EXPECT_EQ(folded.steps_lost_estimated, all.steps_lost_estimated);
  EXPECT_EQ(folded.goodput, all.goodput);
  EXPECT_NEAR(folded.buckets.productive, all.buckets.productive, 1e-6);
  EXPECT_NEAR(folded.buckets.lost, all.buckets.lost, 1e-6);
  EXPECT_NEAR(folded.buckets.disrupted, all.buckets.disrupted, 1e-6);
  EXPECT_NEAR(folded.buckets.idle, all.buckets.idle, 1e-6);
  EXPECT_DOUBLE_EQ(folded.cost.low, all.cost.low);
  EXPECT_DOUBLE_EQ(folded.cost.high, all.cost.high);
}

TEST(RunSummary, FoldingOldAttemptsKeepsEveryTotal) {
  const auto run = MakeRun();
  const std::int64_t now = kT0 + 300 * 100 * kSec;
  const auto all = Summarize(run.ledger, run.attempts, now);
  ASSERT_EQ(all.attempt_count, 300);
  ASSERT_GT(all.steps_lost_measured, 0u);  // the corrupt checkpoints count
  ASSERT_GT(all.lost_seconds, 0.0);
  for (const std::size_t keep : {1, 2, 64, 299, 300, 1000}) {
    auto kept = run.attempts;
    FoldedAttempts folded;
    FoldOldest(run.ledger, kept, folded, keep);
    EXPECT_EQ(kept.size(), std::min<std::size_t>(keep, 300)) << keep;
    EXPECT_EQ(folded.count + static_cast<int>(kept.size()), 300);
    SCOPED_TRACE("keep " + std::to_string(keep));
    ExpectSameTotals(all, Summarize(run.ledger, kept, now, std::nullopt, folded));
  }
}

TEST(RunSummary, FoldingAsAttemptsEndMatchesFoldingOnceAndCountsTheRunningOne) {
  auto run = MakeRun();
  state::AttemptRecord running;
  running.attempt = 301;
  running.started_ms = kT0 + 300 * 100 * kSec;
  running.resume_step = run.attempts.back().resume_step;
  const std::int64_t now = running.started_ms + 50 * kSec;
  const auto all = Summarize(run.ledger, run.attempts, now, running);
  std::vector<state::AttemptRecord> kept;
  FoldedAttempts folded;
  for (const auto& a : run.attempts) {  // as the telemetry observer does, one end at a time
    kept.push_back(a);
    FoldOldest(run.ledger, kept, folded, 8);
  }
  ASSERT_EQ(kept.size(), 8u);
  const auto live = Summarize(run.ledger, kept, now, running, folded);
  ExpectSameTotals(all, live);
  ASSERT_FALSE(live.attempts.empty());
  EXPECT_TRUE(live.attempts.back().running);
  EXPECT_EQ(live.attempts.back().record.attempt, 301);
}

}  // namespace
}  // namespace spotvisor::telemetry

// Counter reconciliation between the Fsm and the job journal: what a new supervisor starts
// with (state.json plus attempts only attempts.jsonl knows), what it writes back, and which
// changes are worth a write. Clocks are plain arguments.
#include <gtest/gtest.h>

#include "spotvisor/supervisor/journal_counters.hpp"

namespace spotvisor::supervisor {
namespace {

using std::chrono::milliseconds;

const TimePoint kNow = TimePoint{} + std::chrono::hours(5);
constexpr std::int64_t kNowMs = 1'700'000'000'000;

state::AttemptRecord Attempt(int n, Outcome outcome) {
  state::AttemptRecord r;
  r.attempt = n;
  r.outcome = std::string(ToString(outcome));
  return r;
}

TEST(JournalCounters, RestoreTakesStateJsonAsItIs) {
  state::PersistedState s;
  s.attempts = 4;
  s.failures = 2;
  s.hangs = 1;
  s.preemptions = 1;
  s.consecutive_failures = 2;
  s.no_progress_streak = 1;
  s.last_resume_step = 300;
  s.recent_failures_ms = {kNowMs - 5000, kNowMs - 1000};
  // Attempts the state already counts change nothing.
  const Counters c = RestoreCounters(s, {Attempt(3, Outcome::kFailed), Attempt(4, Outcome::kHang)}, kNowMs, kNow);
  EXPECT_EQ(c.attempts, 4);
  EXPECT_EQ(c.failures, 2);
  EXPECT_EQ(c.hangs, 1);
  EXPECT_EQ(c.preemptions, 1);
  EXPECT_EQ(c.consecutive_failures, 2);
  EXPECT_EQ(c.no_progress_streak, 1);
  EXPECT_EQ(c.last_resume_step, std::optional<std::uint64_t>(300));
  ASSERT_EQ(c.recent_failures.size(), 2u);
  EXPECT_EQ(c.recent_failures[0], kNow - milliseconds(5000));  // unix ms turned into steady time
  EXPECT_EQ(c.recent_failures[1], kNow - milliseconds(1000));
}

// After a power cut state.json (fsynced at exit only) may lag attempts.jsonl: a crash the
// journal knows is never handed back to the budget.
TEST(JournalCounters, AttemptsOnlyTheJournalKnowsAreCountedByOutcome) {
  state::PersistedState s;
  s.attempts = 2;
  s.failures = 1;
  s.consecutive_failures = 1;
  const std::vector<state::AttemptRecord> attempts = {
      Attempt(1, Outcome::kFailed),    Attempt(2, Outcome::kDone),  // known to state.json
      Attempt(3, Outcome::kFailed),    Attempt(4, Outcome::kSpawnFailed), Attempt(5, Outcome::kHang),
      Attempt(6, Outcome::kPreempted), Attempt(7, Outcome::kStopped),     Attempt(8, Outcome::kBudget),
  };
  const Counters c = RestoreCounters(s, attempts, kNowMs, kNow);
  EXPECT_EQ(c.attempts, 8);
  EXPECT_EQ(c.failures, 3);  // 1 + failed + spawn-failed
  EXPECT_EQ(c.consecutive_failures, 3);
  EXPECT_EQ(c.hangs, 1);
  EXPECT_EQ(c.preemptions, 1);
}

// Issue 35: only a restart after a failure counts toward restart.no_progress_limit, so a new
// supervisor needs to know how the last attempt ended; attempts.jsonl says it.
TEST(JournalCounters, TheLastAttemptsOutcomeSaysWhetherItFailed) {
  state::PersistedState s;
  s.attempts = 3;
  for (auto [last, failed] : {std::pair{Outcome::kFailed, true}, std::pair{Outcome::kHang, true},
                              std::pair{Outcome::kSpawnFailed, true}, std::pair{Outcome::kPreempted, false},
                              std::pair{Outcome::kStopped, false}, std::pair{Outcome::kPeerStopped, false}}) {
    const Counters c = RestoreCounters(s, {Attempt(2, Outcome::kFailed), Attempt(3, last)}, kNowMs, kNow);
    EXPECT_EQ(c.last_attempt_failed, failed) << ToString(last);
  }
  EXPECT_FALSE(RestoreCounters(s, {}, kNowMs, kNow).last_attempt_failed);
}

TEST(JournalCounters, AnAttemptWithoutAnOutcomeStillCountsAsStarted) {
  state::AttemptRecord unfinished;
  unfinished.attempt = 3;  // the supervisor died while it ran
  const Counters c = RestoreCounters(state::PersistedState{}, {unfinished}, kNowMs, kNow);
  EXPECT_EQ(c.attempts, 3);
  EXPECT_EQ(c.failures, 0);
}

TEST(JournalCounters, StoreThenRestoreIsTheSameCounters) {
  Counters c;
  c.attempts = 9;
  c.failures = 4;
  c.hangs = 2;
  c.preemptions = 3;
  c.consecutive_failures = 1;
  c.no_progress_streak = 2;
  c.last_resume_step = 77;
  c.recent_failures = {kNow - milliseconds(2500), kNow - milliseconds(10)};
  state::PersistedState s;
  s.job = "kept";
  s.phase = "running";
  StoreCounters(c, kNowMs, kNow, s);
  EXPECT_EQ(s.job, "kept");  // the driver's parts are untouched
  EXPECT_EQ(s.phase, "running");
  EXPECT_EQ(s.recent_failures_ms, (std::vector<std::int64_t>{kNowMs - 2500, kNowMs - 10}));
  // A later supervisor, 60 s on in both clocks.
  const Counters back = RestoreCounters(s, {}, kNowMs + 60000, kNow + std::chrono::seconds(60));
  EXPECT_EQ(back.attempts, 9);
  EXPECT_EQ(back.failures, 4);
  EXPECT_EQ(back.hangs, 2);
  EXPECT_EQ(back.preemptions, 3);
  EXPECT_EQ(back.consecutive_failures, 1);
  EXPECT_EQ(back.no_progress_streak, 2);
  EXPECT_EQ(back.last_resume_step, std::optional<std::uint64_t>(77));
  EXPECT_EQ(back.recent_failures, c.recent_failures);
}

TEST(JournalCounters, OnlyChangesWorthAWriteAreOne) {
  state::PersistedState saved;
  saved.attempts = 1;
  saved.phase = "running";
  auto next = saved;
  EXPECT_TRUE(SameForTheJournal(next, saved));
  next.phase = "selecting";  // a passing phase is not worth a write of its own
  EXPECT_TRUE(SameForTheJournal(next, saved));
  next.phase = "backoff";
  EXPECT_TRUE(SameForTheJournal(next, saved));
  for (const char* phase : {"drained", "finished"}) {
    next.phase = phase;
    EXPECT_FALSE(SameForTheJournal(next, saved)) << phase;
  }
  next = saved;
  next.failures = 1;
  EXPECT_FALSE(SameForTheJournal(next, saved));
  next = saved;
  next.last_resume_step = 5;
  EXPECT_FALSE(SameForTheJournal(next, saved));
  next = saved;
  next.last_epoch = 2;  // fencing reads it while the attempt runs
  EXPECT_FALSE(SameForTheJournal(next, saved));
  next = saved;
  next.last_exit_message = "stopped";
  EXPECT_FALSE(SameForTheJournal(next, saved));
  next = saved;
  next.child = process::ChildIdentity{};
  next.child->pid = 42;
  EXPECT_FALSE(SameForTheJournal(next, saved));
  next.recent_failures_ms = {1};  // the window moves only with a failure, which the counts show
  saved.child = next.child;
  EXPECT_TRUE(SameForTheJournal(next, saved));
}

}  // namespace
}  // namespace spotvisor::supervisor

// Goodput in buckets (issue 24): a hand-timed run checked bucket by bucket, and on several
// constructed ledgers (many attempts, folded or not, a billing minimum, a running attempt,
// sessions shorter than the attempts) the buckets sum to the billed time. Notices to their
// saves: which checkpoint settles a notice, its outcome against the deadline.
#include <gtest/gtest.h>

#include "spotvisor/telemetry/notice_saves.hpp"
#include "spotvisor/telemetry/run_summary.hpp"
#include "support/test_support.hpp"

namespace spotvisor::telemetry {
namespace {

constexpr std::int64_t kT0 = 1'700'000'000'000;  // unix ms
constexpr std::int64_t kSec = 1000;

CheckpointRecord Ckpt(std::uint64_t step, std::int64_t at_s, int attempt, std::optional<std::int64_t> write_ms,
                      bool good = true) {
  CheckpointRecord c;
  c.name = "ckpt_step" + std::to_string(step);
  c.step = step;
  c.mtime_ms = kT0 + at_s * kSec;
  c.seen_ms = c.mtime_ms + 500;
  c.write_ms = write_ms;
  c.good = good;
  c.attempt = attempt;
  return c;
}

state::AttemptRecord Attempt(int n, std::int64_t start_s, std::int64_t end_s, const std::string& outcome,
                             std::optional<std::uint64_t> resume = std::nullopt) {
  state::AttemptRecord a;
  a.attempt = n;
  a.started_ms = kT0 + start_s * kSec;
  a.ended_ms = kT0 + end_s * kSec;
  a.outcome = outcome;
  a.resume_step = resume;
  return a;
}

SessionRecord Session(std::int64_t start_s, std::int64_t end_s) {
  SessionRecord s;
  s.started_ms = s.last_seen_ms = kT0 + start_s * kSec;
  s.ended_ms = kT0 + end_s * kSec;
  return s;
}

// One session of 1000 s. Attempt 1 (10-280 s): first progress at 40 s (heartbeat), good
// checkpoints at 100, 200 s (5 s writes), a stop notice at 250 s, its save at 260 s (3 s).
// Attempt 2 (300-500 s, resumed): first progress = its first checkpoint, at 400 s; crashes.
// The group waits 505-515 s. Attempt 3 (520-900 s): progress at 530 s, done.
struct HandTimed {
  RunLedger ledger;
  std::vector<state::AttemptRecord> attempts;
};

HandTimed MakeHandTimed() {
  HandTimed h;
  auto& l = h.ledger;
  l.sessions.push_back(Session(0, 1000));
  l.AddFirstProgress(1, kT0 + 40 * kSec);
  l.AddFirstProgress(3, kT0 + 530 * kSec);
  l.AddCheckpoint(Ckpt(100, 100, 1, 5000));
  l.AddCheckpoint(Ckpt(200, 200, 1, 5000));
  l.AddCheckpoint(Ckpt(250, 260, 1, 3000));
  l.AddCheckpoint(Ckpt(300, 400, 2, std::nullopt));
  NoticeRecord n;
  n.received_ms = kT0 + 250 * kSec;
  n.action = "stop";
  n.attempt = 1;
  l.notices.push_back(n);
  l.AddWaiting({kT0 + 505 * kSec, kT0 + 515 * kSec});
  h.attempts = {Attempt(1, 10, 280, "preempted"), Attempt(2, 300, 500, "failed", 250),
                Attempt(3, 520, 900, "done", 300)};
  return h;
}

TEST(Goodput, BucketsOfAHandTimedRun) {
  const auto h = MakeHandTimed();
  const auto s = Summarize(h.ledger, h.attempts, kT0 + 2000 * kSec);
  const auto& b = s.buckets;
  // Attempt 1: 30 s startup, its save at 260 s after the notice: nothing lost, 260-280 s
  // disrupted; 13 s writing, the rest (207 s) productive. The gap 280-300 s: disrupted.
  // Attempt 2: startup 300-400 s, lost 400-500 s (crash). Gap 500-520 s: 10 s waiting, 10 s
  // disrupted. Attempt 3: startup 10 s, productive 370 s. Idle: 0-10 s and 900-1000 s.
  EXPECT_DOUBLE_EQ(b.productive, 207 + 370);
  EXPECT_DOUBLE_EQ(b.lost, 100);
  EXPECT_DOUBLE_EQ(b.checkpointing, 13);
  EXPECT_DOUBLE_EQ(b.startup, 30 + 100 + 10);
  EXPECT_DOUBLE_EQ(b.disrupted, 20 + 20 + 10);
  EXPECT_DOUBLE_EQ(b.waiting, 10);
  EXPECT_DOUBLE_EQ(b.idle, 110);
  EXPECT_DOUBLE_EQ(s.billed_seconds, 1000);
  EXPECT_DOUBLE_EQ(b.Sum(), s.billed_seconds);
}

TEST(Goodput, ARunningAttemptWithoutProgressIsStartupAndAnInterruptedOneIsLost) {
  RunLedger l;
  l.sessions.push_back(Session(0, 100));
  const auto crashed = Attempt(1, 0, 40, "failed");
  const auto s = Summarize(l, {crashed}, kT0 + 100 * kSec, Attempt(2, 50, 0, ""));
  EXPECT_DOUBLE_EQ(s.buckets.lost, 40);       // no progress signal: all of it, as work.lost_seconds
  EXPECT_DOUBLE_EQ(s.buckets.disrupted, 10);  // crash at 40 s to the start at 50 s
  EXPECT_DOUBLE_EQ(s.buckets.startup, 50);    // still no sign of progress at 100 s
  EXPECT_DOUBLE_EQ(s.buckets.Sum(), s.billed_seconds);
}

void ExpectAddsUp(const RunSummary& s, const char* what) {
  const auto& b = s.buckets;
  for (double v : {b.productive, b.lost, b.checkpointing, b.startup, b.disrupted, b.waiting, b.idle}) {
    EXPECT_GE(v, 0) << what;
  }
  EXPECT_NEAR(b.Sum(), s.billed_seconds, 1e-6) << what;
  EXPECT_GT(s.billed_seconds, 0) << what;
}

// 200 attempts of 90 s every 100 s over two sessions, with notices, saves, crashes, waiting.
HandTimed MakeMany(std::int64_t session_end_s) {
  HandTimed h;
  h.ledger.sessions.push_back(Session(0, session_end_s / 2));
  h.ledger.sessions.push_back(Session(session_end_s / 2, session_end_s));
  std::uint64_t step = 0;
  for (int i = 1; i <= 200; ++i) {
    const std::int64_t t = (i - 1) * 100;
    const std::string outcome = i % 4 == 0 ? "preempted" : i % 4 == 1 ? "failed" : "stopped";
    h.attempts.push_back(Attempt(i, t + 5, t + 95, i == 200 ? "done" : outcome, step));
    if (i % 2 == 0) h.ledger.AddFirstProgress(i, kT0 + (t + 15) * kSec);
    if (i % 3 != 0)
      h.ledger.AddCheckpoint(Ckpt(step += 10, t + 50, i, i % 5 == 0 ? std::nullopt : std::optional(4000)));
    if (i % 4 == 0) {
      NoticeRecord n;
      n.received_ms = kT0 + (t + 80) * kSec;
      n.action = "stop";
      n.attempt = i;
      h.ledger.notices.push_back(n);
      h.ledger.AddCheckpoint(Ckpt(step += 10, t + 85, i, 2000));
    }
    if (i % 7 == 0) h.ledger.AddWaiting({kT0 + (t + 96) * kSec, kT0 + (t + 99) * kSec});
  }
  return h;
}

TEST(Goodput, BucketsSumToTheBilledTimeOnConstructedLedgers) {
  {
    const auto h = MakeHandTimed();
    ExpectAddsUp(Summarize(h.ledger, h.attempts, kT0 + 2000 * kSec), "hand-timed");
  }
  {
    auto h = MakeHandTimed();
    h.ledger.cost.billing_minimum = std::chrono::hours(1);  // billed 3600 s for a 1000 s session
    const auto s = Summarize(h.ledger, h.attempts, kT0 + 2000 * kSec);
    ExpectAddsUp(s, "billing minimum");
    EXPECT_DOUBLE_EQ(s.buckets.idle, 3600 - 890);
  }
  {
    const auto h = MakeMany(20'000);
    ExpectAddsUp(Summarize(h.ledger, h.attempts, kT0 + 30'000 * kSec), "many attempts");
    // Folded as a long-lived supervisor does: the same buckets.
    auto attempts = h.attempts;
    FoldedAttempts folded;
    FoldOldest(h.ledger, attempts, folded, 16);
    const auto all = Summarize(h.ledger, h.attempts, kT0 + 30'000 * kSec);
    const auto part = Summarize(h.ledger, attempts, kT0 + 30'000 * kSec, std::nullopt, folded);
    ExpectAddsUp(part, "folded");
    EXPECT_NEAR(part.buckets.productive, all.buckets.productive, 1e-6);
    EXPECT_NEAR(part.buckets.disrupted, all.buckets.disrupted, 1e-6);
    EXPECT_NEAR(part.buckets.lost, all.buckets.lost, 1e-6);
    EXPECT_NEAR(part.buckets.idle, all.buckets.idle, 1e-6);
  }
  {
    // The sessions end before the attempts do (a supervisor killed, its last refresh
    // stale): the measured buckets are scaled down to the billed time.
    const auto h = MakeMany(10'000);
    ExpectAddsUp(Summarize(h.ledger, h.attempts, kT0 + 30'000 * kSec), "short sessions");
  }
  {
    auto h = MakeMany(20'000);
    auto running = h.attempts.back();
    h.attempts.pop_back();
    running.outcome.clear();
    h.ledger.sessions.back().ended_ms.reset();
    h.ledger.sessions.back().last_seen_ms = kT0 + 19'990 * kSec;  // its newest refresh
    ExpectAddsUp(Summarize(h.ledger, h.attempts, kT0 + 19'990 * kSec, running), "running");
  }
}

NoticeRecord Notice(std::int64_t at_s, std::optional<std::int64_t> window_s, int attempt = 1) {
  NoticeRecord n;
  n.received_ms = kT0 + at_s * kSec;
  if (window_s) n.deadline_ms = n.received_ms + *window_s * kSec;
  n.signal_ms = n.received_ms + 20;
  n.provider = "aws";
  n.kind = "spot-itn";
  n.action = "stop";
  n.attempt = attempt;
  return n;
}

TEST(NoticeSaves, TheFirstGoodCheckpointAfterANoticeSettlesIt) {
  RunLedger l;
  l.notices = {Notice(100, 120), Notice(100, 5), Notice(100, std::nullopt), Notice(100, 120, 2)};
  // Written before the notice: not its save.
  EXPECT_TRUE(MatchCheckpoint(l, Ckpt(10, 90, 1, 1000)).empty());
  // A corrupt one after it appeared, but settles nothing.
  EXPECT_TRUE(MatchCheckpoint(l, Ckpt(20, 103, 1, 1000, false)).empty());
  EXPECT_EQ(l.notices[0].checkpoint, "ckpt_step20");
  EXPECT_FALSE(l.notices[0].validated_ms);
  const auto settled = MatchCheckpoint(l, Ckpt(30, 106, 1, 1000));
  EXPECT_EQ(settled, (std::vector<std::size_t>{0, 1, 2}));
  EXPECT_EQ(l.notices[0].outcome, "saved");
  EXPECT_EQ(l.notices[1].outcome, "saved-late");  // judged good at 106.5 s, the deadline was 105 s
  EXPECT_EQ(l.notices[2].outcome, "no-deadline");
  EXPECT_EQ(l.notices[0].checkpoint, "ckpt_step30");
  EXPECT_EQ(l.notices[0].step, 30u);
  EXPECT_EQ(AfterNotice(l.notices[0], l.notices[0].saved_ms), 6.0);
  EXPECT_EQ(AfterNotice(l.notices[0], l.notices[0].validated_ms), 6.5);
  MatchMirrored(l, "ckpt_step30", kT0 + 110 * kSec);
  EXPECT_EQ(AfterNotice(l.notices[0], l.notices[0].mirrored_ms), 10.0);
  // Attempt 2's notice: its attempt is over when attempt 3 starts, with no save.
  EXPECT_TRUE(SettleOpen(l, 2).empty());
  EXPECT_EQ(SettleOpen(l, 3), (std::vector<std::size_t>{3}));
  EXPECT_EQ(l.notices[3].outcome, "not-saved");
  const std::string line = NoticeEventLine(l.notices[3], 42.0);
  EXPECT_NE(line.find("event=notice_not_saved"), std::string::npos) << line;
  EXPECT_NE(line.find("outcome=not-saved"), std::string::npos) << line;
  EXPECT_NE(line.find("steps_lost=42"), std::string::npos) << line;
  EXPECT_NE(NoticeEventLine(l.notices[0], std::nullopt).find("event=notice_saved"), std::string::npos);
}

// A periodic save that landed 41 ms before the notice passes the coarse-clock rule and is
// taken first; the stop's own save (a newer step, after the signal) then takes its place,
// so the report names what the drain and the mirror handled. A save after the signal stays.
TEST(NoticeSaves, APeriodicSaveJustBeforeTheNoticeGivesWayToTheStopsOwnSave) {
  RunLedger l;
  l.notices = {Notice(100, 120)};
  auto periodic = Ckpt(75, 100, 1, 10);
  periodic.mtime_ms -= 41;
  EXPECT_EQ(MatchCheckpoint(l, periodic), (std::vector<std::size_t>{0}));
  EXPECT_EQ(l.notices[0].checkpoint, "ckpt_step75");
  EXPECT_TRUE(MatchCheckpoint(l, Ckpt(76, 101, 1, 10)).empty());  // revised, not settled twice
  EXPECT_EQ(l.notices[0].checkpoint, "ckpt_step76");
  EXPECT_EQ(l.notices[0].step, 76u);
  EXPECT_EQ(AfterNotice(l.notices[0], l.notices[0].saved_ms), 1.0);
  EXPECT_EQ(l.notices[0].outcome, "saved");
  MatchMirrored(l, "ckpt_step76", kT0 + 103 * kSec);
  EXPECT_EQ(AfterNotice(l.notices[0], l.notices[0].mirrored_ms), 3.0);
  // A stop notice: the newest good checkpoint of its attempt is the one it stopped with.
  MatchCheckpoint(l, Ckpt(77, 102, 1, 10));
  EXPECT_EQ(l.notices[0].checkpoint, "ckpt_step77");
  // A checkpoint-only notice (a rebalance hint): its save came after the signal, and the
  // trainer runs on; a later periodic checkpoint is not its save.
  l.notices = {Notice(200, std::nullopt)};
  l.notices[0].action = "checkpoint";
  MatchCheckpoint(l, Ckpt(90, 201, 1, 10));
  MatchCheckpoint(l, Ckpt(100, 260, 1, 10));
  EXPECT_EQ(l.notices[0].checkpoint, "ckpt_step90");
}

// run.json: the new fields round-trip; a file written before them still loads, with none.
TEST(NoticeSaves, RunJsonKeepsTheNewFieldsAndLoadsOldFiles) {
  testing::TempDir dir;
  RunLedger l;
  auto n = Notice(100, 30);
  n.saved_ms = n.received_ms + 2000;
  n.validated_ms = n.received_ms + 2500;
  n.mirrored_ms = n.received_ms + 4000;
  n.checkpoint = "ckpt_step30";
  n.step = 30;
  n.outcome = "saved";
  l.notices.push_back(n);
  l.first_progress_from = "heartbeat";
  l.AddFirstProgress(7, kT0 + 5);
  l.AddWaiting({kT0, kT0 + 10});
  ASSERT_TRUE(l.Save(dir.path()));
  auto back = RunLedger::Load(dir.path());
  ASSERT_TRUE(back) << back.error().message;
  const auto& b = back->notices.at(0);
  EXPECT_EQ(b.saved_ms, n.saved_ms);
  EXPECT_EQ(b.validated_ms, n.validated_ms);
  EXPECT_EQ(b.mirrored_ms, n.mirrored_ms);
  EXPECT_EQ(b.checkpoint, "ckpt_step30");
  EXPECT_EQ(b.step, std::optional<std::uint64_t>(30));
  EXPECT_EQ(b.outcome, "saved");
  EXPECT_EQ(back->first_progress_from, "heartbeat");
  EXPECT_EQ(back->first_progress_ms.at(7), kT0 + 5);
  ASSERT_EQ(back->waiting.size(), 1u);
  EXPECT_EQ(back->waiting[0].end_ms, kT0 + 10);

  testing::WriteFile(dir.path() / "run.json",
                     R"({"format": 1, "job": "old", "notices": [{"received_ms": 5, "provider": "aws", "kind": "x",
                         "action": "stop", "deadline_ms": 100, "signal_ms": 6, "attempt": 1}]})");
  auto old = RunLedger::Load(dir.path());
  ASSERT_TRUE(old) << old.error().message;
  const auto& o = old->notices.at(0);
  EXPECT_FALSE(o.saved_ms || o.validated_ms || o.mirrored_ms || o.step);
  EXPECT_TRUE(o.outcome.empty());
  EXPECT_EQ(NoticeOutcome(o, true), std::optional<std::string>("not-saved"));
  EXPECT_TRUE(old->first_progress_ms.empty() && old->waiting.empty());
}

}  // namespace
}  // namespace spotvisor::telemetry

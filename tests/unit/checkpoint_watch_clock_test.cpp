// The checkpoint watcher's timing in virtual time: a real DirKeeper and real files in a temp
// dir, a FakeRunControl's clock for the polls. What existed at start is no news; a good
// checkpoint is news at the first poll that sees it (slow, or fast while hurried); a bad one
// only once it held still for half a slow period; a save caught half-way is judged again
// when it changes. The scans run on the keeper's thread: virtual time waits for them.
#include <gtest/gtest.h>

#include "spotvisor/checkpoint_watch/checkpoint_watcher.hpp"
#include "spotvisor/checkpoint_watch/dir_keeper.hpp"
#include "spotvisor/config/loader.hpp"
#include "support/fake_run_control.hpp"
#include "support/file_times.hpp"
#include "support/test_support.hpp"

namespace spotvisor::checkpoint_watch {
namespace {

using namespace std::chrono_literals;
using testing::FakeRunControl;
using testing::TempDir;

const std::string kComplete(4096, 'x');  // format any: good once complete

// `more`: keys appended to the checkpoints section, then further sections.
config::JobConfig Job(const TempDir& dir, const std::string& more = "") {
  auto job = config::LoadJobText(
      "job:\n  name: w\n  command: [\"/bin/true\"]\n"
      "checkpoints:\n  dir: ./ckpt\n  pattern: \"ckpt_step{step}\"\n  format: any\n  validate: full\n" +
          more + "telemetry:\n  state_dir: ./state\n",
      dir / "job.yaml", dir.path());
  EXPECT_TRUE(job) << (job ? "" : job.error().message);
  EXPECT_TRUE(config::Finalize(*job, /*need_command=*/false));
  std::filesystem::create_directories(dir / "ckpt");
  return *job;
}

struct Told {
  std::string name;
  bool good = false;
  Duration at;           // virtual time it reached the subscriber
  WallTime detected_at;  // the verdict's own time
};

// Polls every 10 s, every 1 s while hurried. Members in this order: the watcher goes first.
class WatchClock : public ::testing::Test {
 protected:
  WatchClock()
      : job_(Job(dir_)),
        control_(job_),
        wall0_(control_.clock_.WallNow()),
        watcher_(std::make_shared<DirKeeper>(job_, control_.clock()), control_.clock(), {10s, 1s}) {
    watcher_.Subscribe([this](const std::vector<CheckpointVerdict>& verdicts) {
      for (const auto& v : verdicts) told_.push_back({v.name, v.good, control_.clock_.elapsed(), v.detected_at});
    });
  }
  // OnStart's baseline scan, done before anything else happens.
  void Start() {
    watcher_.OnStart(control_);
    control_.RunFor(0ms);
  }
  void Write(const std::string& name, const std::string& text) {
    testing::WriteFileAt(dir_ / "ckpt" / name, text, control_.clock_.WallNow());
  }

  TempDir dir_;
  config::JobConfig job_;
  FakeRunControl control_;
  WallTime wall0_;  // the virtual wall time at 0
  std::vector<Told> told_;
  CheckpointWatcher watcher_;
};

TEST_F(WatchClock, AGoodCheckpointIsNewsAtTheFirstPollThatSeesItSlowOrHurried) {
  Write("ckpt_step1", kComplete);  // there before the start: the baseline, not news
  Start();
  Write("ckpt_step2", kComplete);
  control_.RunFor(10s);
  ASSERT_EQ(told_.size(), 1u);
  EXPECT_EQ(told_[0].name, "ckpt_step2");
  EXPECT_TRUE(told_[0].good);
  EXPECT_EQ(told_[0].at, 10s);  // the next slow poll
  EXPECT_EQ(told_[0].detected_at, wall0_ + 10s);

  watcher_.Hurry(true);  // a checkpoint was requested: polls every second from now
  control_.RunFor(2500ms);
  Write("ckpt_step3", kComplete);
  control_.RunFor(5s);
  ASSERT_EQ(told_.size(), 2u);
  EXPECT_EQ(told_[1].name, "ckpt_step3");
  EXPECT_EQ(told_[1].at, 13s);

  watcher_.Hurry(false);  // slowly again: the next poll 10 s after this call
  Write("ckpt_step4", kComplete);
  control_.RunFor(9s);
  EXPECT_EQ(told_.size(), 2u);
  control_.RunFor(1s);
  ASSERT_EQ(told_.size(), 3u);
  EXPECT_EQ(told_[2].at, 17500ms + 10s);

  watcher_.OnExit(0, "done");
  EXPECT_EQ(control_.clock_.pending_timers(), 0u);
}

// An empty file may be a save caught half-way by a fast poll: its bad verdict is news only
// after it held still for half a slow period (5 s here).
TEST_F(WatchClock, ABadCheckpointIsNewsOnlyOnceItHeldStillForHalfASlowPeriod) {
  Start();
  watcher_.Hurry(true);
  Write("ckpt_step7", "");
  control_.RunFor(5500ms);  // first seen at 1 s: not yet
  EXPECT_TRUE(told_.empty());
  control_.RunFor(1s);
  ASSERT_EQ(told_.size(), 1u);
  EXPECT_EQ(told_[0].name, "ckpt_step7");
  EXPECT_FALSE(told_[0].good);
  EXPECT_EQ(told_[0].at, 6s);  // seen at 1 s, still at 6 s
  control_.RunFor(1min);
  EXPECT_EQ(told_.size(), 1u) << "a verdict is news once";
}

// The save completes before the bad verdict was told: the changed checkpoint is judged again
// and only its good verdict is news.
TEST_F(WatchClock, ASaveCaughtHalfWayIsJudgedAgainWhenItChanges) {
  Start();
  watcher_.Hurry(true);
  Write("ckpt_step8", "");
  control_.RunFor(2500ms);  // seen empty at 1 s and 2 s
  Write("ckpt_step8", kComplete);
  control_.RunFor(1min);
  ASSERT_EQ(told_.size(), 1u);
  EXPECT_EQ(told_[0].name, "ckpt_step8");
  EXPECT_TRUE(told_[0].good);
  EXPECT_EQ(told_[0].at, 3s);
}

// A deferred stop ends when the trainer's next checkpoint is judged good, and a stop's
// checkpoint is the one the mirror must have before the VM goes: while the Fsm is in
// kDeferred or kStopping the watcher polls fast, as for a request, and slowly again once it
// leaves them.
TEST_F(WatchClock, WhileAStopIsDeferredOrUnderWayTheNextCheckpointIsNewsAtTheNextFastPoll) {
  Start();
  watcher_.OnPhase(supervisor::Phase::kDeferred);
  control_.RunFor(2500ms);
  Write("ckpt_step5", kComplete);
  control_.RunFor(5s);
  ASSERT_EQ(told_.size(), 1u);
  EXPECT_EQ(told_[0].at, 3s) << "the next fast poll, not the next slow one (10 s)";

  watcher_.OnPhase(supervisor::Phase::kStopping);  // fast still
  Write("ckpt_step6", kComplete);
  control_.RunFor(1s);
  ASSERT_EQ(told_.size(), 2u);
  EXPECT_EQ(told_[1].at, 8s) << "the next fast poll, not the next slow one (10 s)";

  watcher_.OnPhase(supervisor::Phase::kBackoff);  // slowly again: the next poll 10 s after this
  Write("ckpt_step7", kComplete);
  control_.RunFor(9s);
  EXPECT_EQ(told_.size(), 2u);
  control_.RunFor(1s);
  ASSERT_EQ(told_.size(), 3u);
  EXPECT_EQ(told_[2].at, 8500ms + 10s);
  watcher_.OnExit(0, "done");
}

// A checkpoint caught half-way (new or changed, not good, not told yet) is a write in
// progress for the write subscribers at each poll that sees it so; once it is good it is
// news to the verdict subscribers instead, and no longer a write.
TEST_F(WatchClock, ACheckpointCaughtHalfWayIsAWriteInProgressUntilItIsGood) {
  std::vector<std::pair<std::string, Duration>> writes;
  watcher_.SubscribeWrites([this, &writes](const std::vector<std::filesystem::path>& paths) {
    for (const auto& p : paths) writes.emplace_back(p.filename().string(), control_.clock_.elapsed());
  });
  Start();
  watcher_.Hurry(true);
  Write("ckpt_step9", "");
  control_.RunFor(2500ms);  // seen empty at 1 s and 2 s
  ASSERT_EQ(writes.size(), 2u);
  EXPECT_EQ(writes[0], (std::pair<std::string, Duration>{"ckpt_step9", 1s}));
  EXPECT_EQ(writes[1].second, 2s);
  Write("ckpt_step9", kComplete);
  control_.RunFor(5s);
  EXPECT_EQ(writes.size(), 2u) << "a good checkpoint is no write in progress";
  ASSERT_EQ(told_.size(), 1u);
  EXPECT_TRUE(told_[0].good);
  watcher_.OnExit(0, "done");
}

// checkpoints.keep 2 and the start's hold: a selection's good checkpoints are kept until the
// attempt starts (a group agrees on one of them while a node it left behind may still save
// newer ones that look good), and in a group the start's checkpoint until the next selection.
class KeptStart : public ::testing::Test {
 protected:
  explicit KeptStart(const std::string& more = "")
      : job_(Job(dir_, "  keep: 2\n" + more)),
        control_(job_),
        keeper_(std::make_shared<DirKeeper>(job_, control_.clock())),
        watcher_(keeper_, control_.clock(), {10s, 1s}) {}
  void Write(const std::string& name) {
    testing::WriteFileAt(dir_ / "ckpt" / name, kComplete, control_.clock_.WallNow());
  }
  bool There(const std::string& name) const { return std::filesystem::exists(dir_ / "ckpt" / name); }
  checkpoint::Selection Select() {
    auto selection = MakeKeptSelector(keeper_)->SelectForResume();
    EXPECT_TRUE(selection) << (selection ? "" : selection.error().message);
    return selection ? *selection : checkpoint::Selection{};
  }
  // ckpt_step1 and ckpt_step2 there, the watcher started (its baseline), then a selection.
  checkpoint::Selection StartOnTwoAndSelect() {
    Write("ckpt_step1");
    Write("ckpt_step2");
    watcher_.OnStart(control_);
    control_.RunFor(0ms);
    return Select();
  }
  void Started(const checkpoint::Selection& s) {
    supervisor::SpawnAction start;
    start.resume = s.chosen;
    watcher_.OnAttemptStarted(start, 0);
  }

  TempDir dir_;
  config::JobConfig job_;
  FakeRunControl control_;
  std::shared_ptr<DirKeeper> keeper_;
  CheckpointWatcher watcher_;
};

TEST_F(KeptStart, ASelectionsCheckpointsOutliveNewerSavesUntilTheStartAloneNotAfter) {
  const auto selection = StartOnTwoAndSelect();
  ASSERT_TRUE(selection.chosen);
  EXPECT_EQ(selection.chosen->step, 2u);
  Write("ckpt_step3");  // saved by a writer the group left behind, say: good until fenced
  Write("ckpt_step4");
  control_.RunFor(10s);  // judged good; checkpoints.keep would leave 4 and 3 only
  EXPECT_TRUE(There("ckpt_step1") && There("ckpt_step2")) << "a selection's checkpoint deleted before the start";
  Started(selection);  // alone: the start holds nothing once made
  Write("ckpt_step5");
  control_.RunFor(10s);
  EXPECT_FALSE(There("ckpt_step1") || There("ckpt_step2") || There("ckpt_step3"));
  EXPECT_TRUE(There("ckpt_step4") && There("ckpt_step5"));
  watcher_.OnExit(0, "done");
}

class KeptGroupStart : public KeptStart {
 protected:
  KeptGroupStart() : KeptStart("coordination:\n  etcd: [\"http://e:2379\"]\n  nodes: 2\n  node_rank: 0\n") {}
};

TEST_F(KeptGroupStart, TheAgreedStartOutlivesNewerSavesUntilTheNextSelection) {
  const auto selection = StartOnTwoAndSelect();
  ASSERT_TRUE(selection.chosen);
  Started(selection);
  watcher_.OnPhase(supervisor::Phase::kRunning);
  for (const char* name : {"ckpt_step3", "ckpt_step4", "ckpt_step5"}) {
    Write(name);
    control_.RunFor(10s);
  }
  EXPECT_TRUE(There("ckpt_step2")) << "the group's start deleted while it may still be needed";
  EXPECT_FALSE(There("ckpt_step1") || There("ckpt_step3"));
  EXPECT_TRUE(There("ckpt_step4") && There("ckpt_step5"));
  const auto next = Select();  // a group's selection prunes nothing (it may not know the newest epoch)
  ASSERT_TRUE(next.chosen);
  EXPECT_EQ(next.chosen->step, 5u);
  EXPECT_TRUE(There("ckpt_step2"));
  Started(next);  // the next start holds 5 instead: the old one goes at the next new checkpoint
  Write("ckpt_step6");
  control_.RunFor(10s);
  EXPECT_FALSE(There("ckpt_step2") || There("ckpt_step4"));
  EXPECT_TRUE(There("ckpt_step5") && There("ckpt_step6"));
  watcher_.OnExit(0, "done");
}

// A node of a group prunes only while its trainer runs and it is a member for sure: one stopped
// past its lease (its trainer saving on: a writer the group left behind) or waiting to join
// sees saves as good that the group's newer epoch fences, and would delete what the others
// run from.
TEST_F(KeptGroupStart, ANodeThatMayHaveBeenLeftBehindOrWaitsToJoinDeletesNothing) {
  Started(StartOnTwoAndSelect());
  watcher_.OnPhase(supervisor::Phase::kRunning);
  control_.member_for_sure = false;  // its lease ran out while it was stopped, say
  for (const char* name : {"ckpt_step3", "ckpt_step4", "ckpt_step5"}) {
    Write(name);
    control_.RunFor(10s);
  }
  EXPECT_TRUE(There("ckpt_step1") && There("ckpt_step3")) << "pruned while maybe left behind";
  control_.member_for_sure = true;
  watcher_.OnPhase(supervisor::Phase::kJoining);  // its trainer stopped: it joins again
  Write("ckpt_step6");
  control_.RunFor(10s);
  EXPECT_TRUE(There("ckpt_step1") && There("ckpt_step3")) << "pruned while waiting to join";
  watcher_.OnPhase(supervisor::Phase::kRunning);
  Write("ckpt_step7");
  control_.RunFor(10s);
  EXPECT_FALSE(There("ckpt_step1") || There("ckpt_step3") || There("ckpt_step4") || There("ckpt_step5"));
  EXPECT_TRUE(There("ckpt_step2") && There("ckpt_step6") && There("ckpt_step7"));  // 2: the start
  watcher_.OnExit(0, "done");
}

}  // namespace
}  // namespace spotvisor::checkpoint_watch

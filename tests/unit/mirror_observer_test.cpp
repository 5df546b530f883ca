// The mirror observer in-process, in virtual time (FakeRunControl), with a path mirror in a
// temp dir: an upload's bandwidth cap costs exactly its virtual time; the clock stands still
// while a copy runs (its BackgroundWork), so no timer fires in the middle of one; uploads go
// on during a stop. With a command mirror whose upload of one checkpoint blocks (reading a
// FIFO nobody writes): the notice's checkpoint makes an older upload give way, and at exit
// what is left is bounded by the notice's deadline.
#include "spotvisor/mirror/mirror_observer.hpp"

#include <gtest/gtest.h>
#include <sys/stat.h>

#include "spotvisor/checkpoint_watch/checkpoint_watcher.hpp"
#include "spotvisor/checkpoint_watch/dir_keeper.hpp"
#include "spotvisor/config/loader.hpp"
#include "support/fake_run_control.hpp"
#include "support/log_capture.hpp"
#include "support/test_support.hpp"

namespace spotvisor::mirror {
namespace {

using namespace std::chrono_literals;
namespace fs = std::filesystem;
using testing::FakeRunControl;
using testing::TempDir;

constexpr std::size_t kCheckpointBytes = 2500;

class MirrorInVirtualTime : public ::testing::Test {
 protected:
  MirrorInVirtualTime() {
    job_ = config::DefaultConfig(dir_.path());
    job_.job.name = "virtual";
    job_.telemetry.state_dir = dir_ / "state";
    job_.checkpoints.dir = dir_ / "ckpt";
    job_.checkpoints.mirror.path = dir_ / "mirror";
    fs::create_directories(*job_.checkpoints.dir);
    fs::create_directories(*job_.checkpoints.mirror.path);
    fs::create_directories(job_.telemetry.state_dir);
    fs::create_directories(*job_.checkpoints.dir / "checkpoint-100");
    testing::WriteFile(*job_.checkpoints.dir / "checkpoint-100" / "weights.bin", std::string(kCheckpointBytes, 'w'));
  }

  // The observer, started on `run_`; made after the config is final.
  MirrorObserver& Start() {
    run_.emplace(job_);
    keeper_ = std::make_shared<checkpoint_watch::DirKeeper>(job_, run_->clock());
    watcher_ = std::make_unique<checkpoint_watch::CheckpointWatcher>(keeper_, run_->clock());
    mirror_ = std::make_unique<MirrorObserver>(job_, *watcher_);
    mirror_->OnStart(*run_);
    return *mirror_;
  }

  // A selection that resumes from checkpoint-100: the observer uploads it.
  checkpoint::Selection Chosen() const {
    checkpoint::Selection s;
    s.chosen = checkpoint::ResumePoint{*job_.checkpoints.dir / "checkpoint-100", 100};
    return s;
  }

  bool Mirrored() const { return fs::exists(*job_.checkpoints.mirror.path / "checkpoint-100" / "weights.bin"); }

  TempDir dir_;
  config::JobConfig job_;
  std::optional<FakeRunControl> run_;  // its clock outlives the keeper and the watcher
  std::shared_ptr<checkpoint_watch::DirKeeper> keeper_;
  std::unique_ptr<checkpoint_watch::CheckpointWatcher> watcher_;
  std::unique_ptr<MirrorObserver> mirror_;  // declared last: gone before the run and the watcher
};

TEST_F(MirrorInVirtualTime, TheBandwidthCapCostsExactlyItsVirtualTime) {
  job_.checkpoints.mirror.bandwidth = 1000;  // bytes/s; the bucket starts with one second's worth
  testing::LogCapture log;
  auto& mirror = Start();
  mirror.OnSelection(Chosen());
  run_->RunFor(0ms);  // returns once the upload let go of the clock
  EXPECT_TRUE(Mirrored());
  // 2500 bytes at 1000/s with 1000 in the bucket: 1.5 s of debt, slept on the run's clock.
  EXPECT_EQ(run_->clock_.elapsed(), 1500ms);
  EXPECT_EQ(log.Count("event=mirrored name=checkpoint-100 step=100"), 1) << log.Joined();
  EXPECT_EQ(log.Count(" ms=1500"), 1) << log.Joined();
  EXPECT_TRUE(mirror.WaitIdle(0ms));
}

// The planner after each upload: 2500 bytes in 1.5 s is 1667 B/s; the window is
// provider.default_window (no provider here). 30 s: it fits, said once; 1 s: at risk, with
// the numbers and the fixes. The rate is kept for preflight.
TEST_F(MirrorInVirtualTime, ThePlannerSaysWhetherSavePlusUploadFitsTheWindow) {
  for (const auto& [window, event] : {std::pair{Duration(30s), "event=durability_plan fits=true window_s=30.0 "},
                                      std::pair{Duration(1s), "event=durability_at_risk window_s=1.0 "}}) {
    SCOPED_TRACE(event);
    job_.checkpoints.mirror.bandwidth = 1000;
    job_.provider.default_window = window;
    testing::LogCapture log;
    auto& mirror = Start();
    mirror.OnSelection(Chosen());
    run_->RunFor(0ms);
    EXPECT_EQ(log.Count(event), 1) << log.Joined();
    EXPECT_EQ(log.Count("save_s=unmeasured upload_s=1.5 "), 1) << log.Joined();
    ASSERT_TRUE(mirror.Plan());
    EXPECT_EQ(mirror.Plan()->fits(), window == Duration(30s));
    if (window == Duration(1s)) {
      EXPECT_EQ(log.Count("advice=\"needs an upload rate of 2.4 KiB/s (measured 1.6 KiB/s), or a checkpoint of at "
                          "most 1.6 KiB (this one: 2.4 KiB)"),
                1)
          << log.Joined();
    }
    ASSERT_TRUE(LoadUploadRate(job_.telemetry.state_dir));
    EXPECT_NEAR(*LoadUploadRate(job_.telemetry.state_dir), 2500.0 / 1.5, 1.0);
    mirror_.reset();
    fs::remove_all(*job_.checkpoints.mirror.path / "checkpoint-100");
  }
}

TEST_F(MirrorInVirtualTime, NoTimerFiresWhileACopyRuns) {
  auto& mirror = Start();
  auto timer = run_->clock_.MakeTimer(run_->io());
  std::optional<bool> mirrored_when_fired;
  timer->After(1ms, [&] { mirrored_when_fired = Mirrored(); });
  mirror.OnSelection(Chosen());  // no cap: the copy takes real time and no virtual time
  run_->RunFor(1s);
  ASSERT_TRUE(mirrored_when_fired.has_value());
  EXPECT_TRUE(*mirrored_when_fired) << "the clock jumped to the timer while the copy was still running";
  EXPECT_EQ(run_->clock_.elapsed(), 1s);
}

TEST_F(MirrorInVirtualTime, UploadsGoOnDuringAStop) {
  auto& mirror = Start();
  mirror.OnPhase(supervisor::Phase::kStopping);
  mirror.OnSelection(Chosen());
  run_->RunFor(0ms);  // held: returns once the upload is done
  EXPECT_TRUE(Mirrored());
  EXPECT_EQ(run_->clock_.elapsed(), 0ms);
  EXPECT_TRUE(mirror.WaitIdle(0ms));
}

// A command mirror whose upload of checkpoint-100 says it started, then blocks until it is
// cancelled; every other checkpoint is copied into dir_/mirror.
class MirrorWithABlockedUpload : public MirrorInVirtualTime {
 protected:
  MirrorWithABlockedUpload() {
    job_.checkpoints.mirror.path.reset();
    job_.job.workdir = dir_.path();
    const fs::path fifo = dir_ / "never-written";
    EXPECT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
    job_.checkpoints.mirror.command = {"/bin/sh", "-c",
                                       "if [ {step} = 100 ]; then : > " + (dir_ / "started-100").string() + "; cat " +
                                           fifo.string() + "; fi; cp -r {checkpoint} " + (dir_ / "mirror").string() +
                                           "/"};
    fs::create_directories(*job_.checkpoints.dir / "checkpoint-200");
    testing::WriteFile(*job_.checkpoints.dir / "checkpoint-200" / "weights.bin", std::string(kCheckpointBytes, 'w'));
  }

  checkpoint::Selection Chosen200() const {
    checkpoint::Selection s;
    s.chosen = checkpoint::ResumePoint{*job_.checkpoints.dir / "checkpoint-200", 200};
    return s;
  }

  preemption::Notice StopNotice(Duration in) const {
    preemption::Notice n;
    n.provider = "file";
    n.kind = "file";
    n.deadline = run_->clock_.WallNow() + in;
    return n;
  }
};

TEST_F(MirrorWithABlockedUpload, TheNoticesCheckpointDoesNotWaitForAnOlderUpload) {
  testing::LogCapture log;
  auto& mirror = Start();
  mirror.OnSelection(Chosen());  // checkpoint-100: blocks
  ASSERT_TRUE(testing::WaitUntil([&] { return fs::exists(dir_ / "started-100"); })) << log.Joined();
  mirror.OnNotice(StopNotice(120s));
  mirror.OnPhase(supervisor::Phase::kStopping);
  mirror.OnSelection(Chosen200());  // the notice's checkpoint: the one slot is taken by 100
  EXPECT_TRUE(mirror.WaitIdle(30s)) << log.Joined();
  EXPECT_TRUE(fs::exists(dir_ / "mirror" / "checkpoint-200"));
  EXPECT_FALSE(fs::exists(dir_ / "mirror" / "checkpoint-100"));
  EXPECT_EQ(log.Count("event=mirror_yielded name=checkpoint-100 step=100 to=checkpoint-200 to_step=200"), 1)
      << log.Joined();
  EXPECT_EQ(log.Count("event=mirrored name=checkpoint-200"), 1) << log.Joined();
  EXPECT_EQ(log.Count("event=mirror_failed"), 0) << log.Joined();
}

TEST_F(MirrorWithABlockedUpload, WithoutANoticeAnOlderUploadIsNotCancelled) {
  testing::LogCapture log;
  auto& mirror = Start();
  mirror.OnSelection(Chosen());
  ASSERT_TRUE(testing::WaitUntil([&] { return fs::exists(dir_ / "started-100"); })) << log.Joined();
  mirror.OnSelection(Chosen200());  // waits for the slot
  EXPECT_FALSE(mirror.WaitIdle(200ms));
  EXPECT_EQ(log.Count("event=mirror_yielded"), 0) << log.Joined();
  job_.checkpoints.mirror.timeout = 0ms;  // the destructor gives up at once
}

TEST_F(MirrorWithABlockedUpload, AtExitWhatIsLeftIsBoundedByTheNoticesDeadline) {
  job_.checkpoints.mirror.timeout = std::chrono::hours(1);
  testing::LogCapture log;
  auto& mirror = Start();
  mirror.OnNotice(StopNotice(1s));
  mirror.OnSelection(Chosen());
  ASSERT_TRUE(testing::WaitUntil([&] { return fs::exists(dir_ / "started-100"); })) << log.Joined();
  mirror.OnExit(75, "notice");
  mirror_.reset();  // at most until the deadline (an hour, were it mirror.timeout)
  EXPECT_EQ(log.Count("event=mirror_abandoned uploading=checkpoint-100"), 1) << log.Joined();
  EXPECT_EQ(log.Count("deadline passed"), 1) << log.Joined();
}

// Issue 36: checkpoints that come faster than a slow mirror uploads them supersede each
// other in the queue; every upload task must still count itself off once, so that the
// observer becomes idle after the last upload and its destructor (spotvisor's exit) returns
// at once instead of waiting out checkpoints.mirror.timeout.
TEST_F(MirrorInVirtualTime, SupersededUploadsLeaveTheObserverIdleAndItsDestructorReturnsAtOnce) {
  job_.checkpoints.mirror.bandwidth = 1000;
  job_.checkpoints.mirror.timeout = 20s;  // what the destructor would wait out, were the count wrong
  for (const char* name : {"checkpoint-200", "checkpoint-300"}) {
    fs::create_directories(*job_.checkpoints.dir / name);
    testing::WriteFile(*job_.checkpoints.dir / name / "weights.bin", std::string(kCheckpointBytes, 'w'));
  }
  testing::LogCapture log;
  auto& mirror = Start();
  for (std::uint64_t step : {100, 200, 300}) {
    checkpoint::Selection s;
    s.chosen = checkpoint::ResumePoint{*job_.checkpoints.dir / ("checkpoint-" + std::to_string(step)), step};
    mirror.OnSelection(s);
  }
  run_->RunFor(0ms);  // returns once no upload holds the clock
  EXPECT_TRUE(fs::exists(*job_.checkpoints.mirror.path / "checkpoint-300" / "weights.bin"));
  EXPECT_GE(log.Count("event=mirror_superseded"), 1) << log.Joined();
  // Real time: a count that went wrong never comes back to idle.
  EXPECT_TRUE(mirror.WaitIdle(10s)) << log.Joined();
  mirror_.reset();  // waits for idle, at most checkpoints.mirror.timeout
  EXPECT_EQ(log.Count("event=mirror_abandoned"), 0) << log.Joined();
}

}  // namespace
}  // namespace spotvisor::mirror

// Hang detection in process and in virtual time: the HeartbeatMonitor against a
// FakeRunControl. The heartbeat is a real file in a temp dir whose mtime the test sets to the
// virtual wall time of each beat; progress lines are handed in as the driver would. A hang
// must be asked for at exactly the last pulse plus health.hang_timeout, never while the
// trainer keeps beating, never while no trainer runs, and at most once per attempt.
#include <gtest/gtest.h>

#include "spotvisor/config/loader.hpp"
#include "spotvisor/health/heartbeat_monitor.hpp"
#include "support/fake_run_control.hpp"
#include "support/file_times.hpp"
#include "support/test_support.hpp"

namespace spotvisor::health {
namespace {

using namespace std::chrono_literals;
using supervisor::Phase;
using testing::FakeRunControl;
using testing::TempDir;

config::JobConfig Job(const TempDir& dir, const std::string& health) {
  auto job = config::LoadJobText("job:\n  name: hb\n  command: [\"/bin/true\"]\nhealth:\n" + health +
                                     "  hang_timeout: 30s\ntelemetry:\n  state_dir: ./state\n",
                                 dir / "job.yaml", dir.path());
  EXPECT_TRUE(job) << (job ? "" : job.error().message);
  EXPECT_TRUE(config::Finalize(*job));
  return *job;
}

// The monitor, its fake driver and the heartbeat file. Members in this order: the monitor
// goes first (its stat worker posts to the control's loop).
class Heartbeat : public ::testing::Test {
 protected:
  void Begin(const std::string& health) {
    job_ = Job(dir_, health);
    control_ = std::make_unique<FakeRunControl>(job_);
    monitor_ = std::make_unique<HeartbeatMonitor>(job_);
    monitor_->OnStart(*control_);
  }
  // As the driver does: the start, then the phase.
  void StartAttempt(int attempt) {
    supervisor::SpawnAction start;
    start.attempt = attempt;
    monitor_->OnAttemptStarted(start, 1000 + attempt);
    monitor_->OnPhase(Phase::kRunning);
  }
  void Beat() { testing::WriteFileAt(dir_ / "hb", "", control_->clock_.WallNow()); }
  std::vector<FakeRunControl::Request> Hangs() const { return control_->Requests("stop:hang"); }

  TempDir dir_;
  config::JobConfig job_;
  std::unique_ptr<FakeRunControl> control_;
  std::unique_ptr<HeartbeatMonitor> monitor_;
};

TEST_F(Heartbeat, ABeatingTrainerNeverHangsAndOneThatStopsHangsExactlyOneTimeoutAfterItsLastBeat) {
  Begin("  heartbeat_file: ./hb\n");
  StartAttempt(1);
  for (int i = 0; i < 12; ++i) {  // a beat every 10 s for 2 minutes
    control_->RunFor(10s);
    Beat();
  }
  EXPECT_TRUE(control_->requests.empty());
  control_->RunFor(10min);  // silent from 120 s on
  const auto hangs = Hangs();
  ASSERT_EQ(hangs.size(), 1u) << "one stop request per attempt";
  EXPECT_EQ(hangs[0].at, 150s);
  EXPECT_NE(hangs[0].detail.find("no heartbeat for 30s"), std::string::npos) << hangs[0].detail;
  EXPECT_NE(hangs[0].detail.find("last pulse 30s ago"), std::string::npos) << hangs[0].detail;
}

// A heartbeat file left by an earlier attempt is no pulse: the hang clock starts at the start,
// so an hour-old file gives the trainer its full timeout, and no file at all the same.
TEST_F(Heartbeat, TheHangClockStartsWhenTheTrainerStartsNotAtAnOldHeartbeat) {
  Begin("  heartbeat_file: ./hb\n");
  testing::WriteFileAt(dir_ / "hb", "", control_->clock_.WallNow() - 1h);
  control_->RunFor(5min);  // no trainer yet: nothing is judged
  EXPECT_TRUE(control_->requests.empty());
  StartAttempt(1);
  control_->RunFor(29s);
  EXPECT_TRUE(control_->requests.empty());
  control_->RunFor(1min);
  auto hangs = Hangs();
  ASSERT_EQ(hangs.size(), 1u);
  EXPECT_EQ(hangs[0].at, 5min + 30s);
  EXPECT_NE(hangs[0].detail.find("no pulse since the trainer started"), std::string::npos) << hangs[0].detail;

  std::filesystem::remove(dir_ / "hb");  // the next attempt, without any file
  const Duration second_start = control_->clock_.elapsed();
  StartAttempt(2);
  control_->RunFor(1min);
  hangs = Hangs();
  ASSERT_EQ(hangs.size(), 2u);
  EXPECT_EQ(hangs[1].at, second_start + 30s);
}

// Stopping, backing off, drained: no hang clock. The next start gets a full timeout again.
TEST_F(Heartbeat, NoHangIsJudgedWhileNoTrainerRuns) {
  Begin("  heartbeat_file: ./hb\n");
  StartAttempt(1);
  control_->RunFor(20s);
  monitor_->OnPhase(Phase::kStopping);  // e.g. a notice: the trainer stops within the grace
  monitor_->OnPhase(Phase::kBackoff);
  control_->RunFor(1h);
  EXPECT_TRUE(control_->requests.empty());
  EXPECT_EQ(control_->clock_.pending_timers(), 0u);
  StartAttempt(2);
  control_->RunFor(1min);
  const auto hangs = Hangs();
  ASSERT_EQ(hangs.size(), 1u);
  EXPECT_EQ(hangs[0].at, 20s + 1h + 30s);
}

// health.progress_pattern: a matching output line is a pulse (its group the step reached);
// any other line is not.
TEST_F(Heartbeat, AProgressLineIsAPulseAndTheHangNamesTheLastStep) {
  Begin("  progress_pattern: \"step (\\\\d+)\"\n");
  StartAttempt(1);
  for (int step = 1; step <= 5; ++step) {
    control_->RunFor(20s);
    monitor_->OnTrainerLine("train step " + std::to_string(step) + " loss 0.1");
  }
  for (int i = 0; i < 5; ++i) {  // chatter without progress
    control_->RunFor(5s);
    monitor_->OnTrainerLine("loading shard");
  }
  control_->RunFor(1min);
  const auto hangs = Hangs();
  ASSERT_EQ(hangs.size(), 1u);
  EXPECT_EQ(hangs[0].at, 100s + 30s);
  EXPECT_NE(hangs[0].detail.find("progress_pattern: last pulse 30s ago, last step 5"), std::string::npos)
      << hangs[0].detail;
}

// Both pulses at once: the newer counts, whichever it is.
TEST_F(Heartbeat, WithAFileAndAPatternTheNewerPulseCounts) {
  Begin("  heartbeat_file: ./hb\n  progress_pattern: \"step (\\\\d+)\"\n");
  StartAttempt(1);
  control_->RunFor(10s);
  Beat();
  control_->RunFor(15s);
  monitor_->OnTrainerLine("step 3");  // 25 s: newer than the file
  control_->RunFor(1min);
  const auto hangs = Hangs();
  ASSERT_EQ(hangs.size(), 1u);
  EXPECT_EQ(hangs[0].at, 25s + 30s);
}

}  // namespace
}  // namespace spotvisor::health

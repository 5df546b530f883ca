// Periodic checkpoint requests in process and in virtual time: the CadenceObserver against a
// FakeRunControl, with a real CheckpointWatcher on a temp dir where measuring needs one (the
// test writes the trainer's checkpoints, dated on the virtual wall clock). The test plays the
// driver: starts, ends and phases as it reports them. Every time asserted is exact.
#include "spotvisor/cadence/cadence_observer.hpp"

#include <gtest/gtest.h>

#include <algorithm>

#include "spotvisor/checkpoint_watch/dir_keeper.hpp"
#include "spotvisor/config/loader.hpp"
#include "support/fake_run_control.hpp"
#include "support/file_times.hpp"
#include "support/test_support.hpp"

namespace spotvisor::cadence {
namespace {

using namespace std::chrono_literals;
using checkpoint_watch::CheckpointWatcher;
using checkpoint_watch::DirKeeper;
using supervisor::Phase;
using testing::FakeRunControl;
using testing::TempDir;

config::JobConfig Job(const TempDir& dir, const std::string& cadence) {
  auto job = config::LoadJobText(
      "job:\n  name: cad\n  command: [\"/bin/true\"]\n"
      "checkpoints:\n  dir: ./ckpt\n  pattern: \"ckpt_step{step}\"\n  format: any\n  validate: full\n"
      "telemetry:\n  state_dir: ./state\ncadence:\n" +
          cadence,
      dir / "job.yaml", dir.path());
  EXPECT_TRUE(job) << (job ? "" : job.error().message);
  EXPECT_TRUE(config::Finalize(*job));
  std::filesystem::create_directories(dir / "ckpt");
  return *job;
}

std::vector<Duration> Times(const std::vector<FakeRunControl::Request>& requests) {
  std::vector<Duration> out;
  for (const auto& r : requests) out.push_back(r.at);
  return out;
}

// The observer (and, with_watcher, the watcher: polls every 10 s, every second while a
// requested checkpoint is awaited), registered as cli/run_observers.cpp does.
class Cadence : public ::testing::Test {
 protected:
  void Begin(const std::string& cadence, bool with_watcher) {
    job_ = Job(dir_, cadence);
    control_ = std::make_unique<FakeRunControl>(job_);
    if (with_watcher) {
      watcher_ = std::make_unique<CheckpointWatcher>(std::make_shared<DirKeeper>(job_, control_->clock()),
                                                     control_->clock(), checkpoint_watch::WatchTiming{10s, 1s});
    }
    observer_ = std::make_unique<CadenceObserver>(job_, watcher_.get(), "none");
    if (watcher_) watcher_->OnStart(*control_);
    observer_->OnStart(*control_);
    control_->RunFor(0ms);  // the watcher's baseline
  }
  void StartAttempt(int attempt) {
    supervisor::SpawnAction start;
    start.attempt = attempt;
    observer_->OnAttemptStarted(start, 1000 + attempt);
    observer_->OnPhase(Phase::kRunning);
  }
  void EndAttempt(int attempt, Duration ran, const std::string& outcome) {
    state::AttemptRecord record;
    record.attempt = attempt;
    record.ended_ms = UnixMillis(control_->clock_.WallNow());
    record.started_ms = record.ended_ms - ran.count();
    record.outcome = outcome;
    observer_->OnAttemptEnded(record);
    observer_->OnPhase(Phase::kBackoff);
  }
  // The driver delivered signals.checkpoint for the request just made.
  void Delivered() { observer_->OnSignalSent(job_.signals.checkpoint, config::SignalTarget::kGroup); }
  void WriteCheckpoint(std::uint64_t step) {
    testing::WriteFileAt(dir_ / "ckpt" / ("ckpt_step" + std::to_string(step)), std::string(4096, 'x'),
                         control_->clock_.WallNow());
  }
  std::vector<FakeRunControl::Request> Asked() const { return control_->Requests("checkpoint"); }
  // Every journal line, once the observer's writer has finished.
  std::vector<CheckpointRecord> Journal() {
    observer_.reset();
    return ReadCheckpointRecords(job_.telemetry.state_dir);
  }

  TempDir dir_;
  config::JobConfig job_;
  std::unique_ptr<FakeRunControl> control_;
  std::unique_ptr<CheckpointWatcher> watcher_;
  std::unique_ptr<CadenceObserver> observer_;
};

// Delivered but never answered (no watcher here): each request counts as unanswered when the
// next is due, and the period does not drift.
TEST_F(Cadence, FixedRequestsComeEveryPeriodExactly) {
  Begin("  every: 10m\n", /*with_watcher=*/false);
  StartAttempt(1);
  for (int i = 0; i < 3; ++i) {
    control_->RunFor(10min);
    Delivered();
  }
  const auto asked = Asked();
  EXPECT_EQ(Times(asked), (std::vector<Duration>{10min, 20min, 30min}));
  EXPECT_EQ(asked[0].detail, "cadence every 10m");
  std::vector<std::int64_t> waited;
  for (const auto& r : Journal()) {
    if (r.event == "unanswered") waited.push_back(r.waited_ms.value_or(-1));
  }
  EXPECT_EQ(waited, (std::vector<std::int64_t>{600000, 600000}));
}

// A trainer that has not run a full period may have no handler yet; between attempts there is
// none at all; a restarted trainer gets a full period again, and a stop cancels the request.
TEST_F(Cadence, NoRequestWhileNoTrainerRunsAndAFullPeriodAfterARestart) {
  Begin("  every: 10m\n", /*with_watcher=*/false);
  StartAttempt(1);
  control_->RunFor(7min);
  EndAttempt(1, 7min, "failed");
  control_->RunFor(1h);
  EXPECT_TRUE(Asked().empty());
  StartAttempt(2);  // at 67 min
  control_->RunFor(25min);
  EXPECT_EQ(Times(Asked()), (std::vector<Duration>{77min, 87min}));
  observer_->OnPhase(Phase::kStopping);  // at 92 min
  control_->RunFor(1h);
  EXPECT_EQ(Asked().size(), 2u);
}

// Adaptive: `min` until a cost is measured; the trainer answers the first request 30 s later
// (cost C = 30 s, exactly); from the checkpoint on, the period is Daly(C, M) clamped to
// [min, max], with M the 2 h prior.
TEST_F(Cadence, AdaptiveAsksAtMinThenEveryDalyIntervalOfTheMeasuredCost) {
  Begin("  every: adaptive\n  min: 1m\n  max: 1h\n  mtbi_prior: 2h\n", /*with_watcher=*/true);
  StartAttempt(1);
  control_->RunFor(1min);
  ASSERT_EQ(Times(Asked()), (std::vector<Duration>{1min}));
  EXPECT_EQ(Asked()[0].detail, "adaptive cadence C=unmeasured M=2h interval=1m");
  Delivered();
  control_->RunFor(30s);
  WriteCheckpoint(100);  // the answer, at 90 s; the hurried watcher sees it at 91 s

  CadencePolicy expected(job_.cadence, MtbiPriorFor(job_.cadence, "none"));
  expected.ObserveCost(30s);
  const Duration daly = expected.Interval();
  ASSERT_GT(daly, 1min);
  ASSERT_LT(daly, 1h);
  control_->RunFor(1s + daly);
  EXPECT_EQ(observer_->policy().Cost(), std::optional<Duration>(30s));
  EXPECT_EQ(observer_->policy().Interval(), daly);
  EXPECT_EQ(Times(Asked()), (std::vector<Duration>{1min, 91s + daly}));

  const auto journal = Journal();
  const auto seen = std::find_if(journal.begin(), journal.end(), [](const auto& r) { return r.event == "checkpoint"; });
  ASSERT_NE(seen, journal.end());
  EXPECT_EQ(seen->reason, "adaptive");
  EXPECT_EQ(seen->cost_ms, std::optional<std::int64_t>(30000));
  EXPECT_EQ(seen->interval_ms, std::optional<std::int64_t>(daly.count()));
  const auto changed =
      std::find_if(journal.begin(), journal.end(), [](const auto& r) { return r.event == "interval"; });
  ASSERT_NE(changed, journal.end());
  EXPECT_EQ(changed->reason, "measured cost");
  EXPECT_EQ(changed->interval_ms, std::optional<std::int64_t>(daly.count()));
}

// A checkpoint the trainer wrote on its own restarts the period: the next request comes a full
// period after the watcher saw it, not at the old due time.
TEST_F(Cadence, TheTrainersOwnCheckpointRestartsThePeriod) {
  Begin("  every: 10m\n", /*with_watcher=*/true);
  StartAttempt(1);
  control_->RunFor(4min);
  WriteCheckpoint(40);  // seen by the slow poll at 4 min 10 s
  control_->RunFor(15min);
  EXPECT_EQ(Times(Asked()), (std::vector<Duration>{14min + 10s}));
  const auto journal = Journal();
  ASSERT_FALSE(journal.empty());
  EXPECT_EQ(journal[0].event, "checkpoint");
  EXPECT_EQ(journal[0].reason, "trainer");
  EXPECT_FALSE(journal[0].cost_ms);
}

}  // namespace
}  // namespace spotvisor::cadence

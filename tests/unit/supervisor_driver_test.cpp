// The driver in-process, against the scripted fake Host of driver_fakes.hpp: no process is
// started, no signal sent, no real timer set. Time is virtual: minutes of grace and backoff
// pass as soon as nothing else is ready, so each run takes milliseconds of real time and its
// times are exact. What the driver does is read back from what the host recorded (with the
// virtual time of each effect), the journal it wrote and its exit code.
#include <gtest/gtest.h>

#include <boost/asio/io_context.hpp>
#include <csignal>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>

#include "spotvisor/config/loader.hpp"
#include "spotvisor/preemption/time_format.hpp"
#include "spotvisor/supervisor/driver.hpp"
#include "support/log_capture.hpp"
#include "support/test_support.hpp"
#include "unit/driver_fakes.hpp"

namespace spotvisor::supervisor {
namespace {

namespace asio = boost::asio;
using fake::FakeCoordinator;
using fake::FakeHost;
using fake::Script;
using fake::SteppingSelector;
using std::chrono::milliseconds;
using testing::TempDir;

class DriverTest : public ::testing::Test {
 protected:
  config::JobConfig Job() {
    auto job = config::LoadJobText(
        "job:\n"
        "  name: driver-test\n"
        "  command: [\"/bin/true\", \"--train\"]\n"
        "  resume_args: [\"--resume_from={checkpoint}\", \"--step={step}\"]\n"
        "provider:\n"
        "  kind: file\n"
        "  file: ./notice-trigger\n"
        "signals:\n"
        "  grace: 200ms\n"
        "  kill_timeout: 1s\n"
        "restart:\n"
        "  backoff: {initial: 1ms, max: 5ms, jitter: 0}\n"
        "checkpoints:\n"
        "  dir: ./ckpt\n"
        "  pattern: \"ckpt_step{step}\"\n"
        "telemetry:\n"
        "  state_dir: ./state\n",
        dir_ / "job.yaml", dir_.path());
    EXPECT_TRUE(job) << (job ? "" : job.error().message);
    EXPECT_TRUE(config::Finalize(*job));
    return *job;
  }

  std::vector<std::string> Attempts(const config::JobConfig& job) {
    return testing::ReadLines(job.telemetry.state_dir / "attempts.jsonl");
  }

  TempDir dir_;
};

TEST_F(DriverTest, ExitOneBacksOffAndRespawnsResumedAtStep20) {
  const auto job = Job();
  auto host = std::make_unique<FakeHost>(std::vector<Script>{
      {milliseconds(5), ExitStatus{1, 0}},
      {milliseconds(5), ExitStatus{0, 0}},
  });
  FakeHost& fake = *host;
  testing::LogCapture log;
  Driver driver(job, std::make_unique<SteppingSelector>(dir_ / "ckpt"), std::move(host));
  const int code = driver.Run();

  EXPECT_EQ(code, Code(ExitCode::kDone)) << log.Joined();
  ASSERT_EQ(fake.spawns_.size(), 2u);
  EXPECT_EQ(fake.spawns_[0].argv, (std::vector<std::string>{"/bin/true", "--train"}));
  const auto resumed = (dir_ / "ckpt" / "ckpt_step20").string();
  EXPECT_EQ(fake.spawns_[1].argv,
            (std::vector<std::string>{"/bin/true", "--train", "--resume_from=" + resumed, "--step=20"}));
  EXPECT_EQ(fake.spawns_[1].env.at("SPOTVISOR_RESTART_COUNT"), "1");
  const auto attempts = Attempts(job);
  ASSERT_EQ(attempts.size(), 2u);
  EXPECT_NE(attempts[0].find("\"outcome\":\"failed\""), std::string::npos) << attempts[0];
  EXPECT_NE(attempts[1].find("\"outcome\":\"done\""), std::string::npos) << attempts[1];
  EXPECT_NE(attempts[1].find("\"resume_step\":20"), std::string::npos) << attempts[1];
  // Each record names the epoch it was spawned with (fencing): alone, the attempt number.
  EXPECT_NE(attempts[0].find("\"epoch\":1"), std::string::npos) << attempts[0];
  EXPECT_NE(attempts[1].find("\"epoch\":2"), std::string::npos) << attempts[1];
  EXPECT_EQ(fake.spawns_[1].env.at("SPOTVISOR_EPOCH"), "2");
  const std::string state = testing::ReadFile(job.telemetry.state_dir / "state.json");
  EXPECT_NE(state.find("\"last_epoch\": 2"), std::string::npos) << state;
  EXPECT_NE(state.find("\"last_epoch_step\": 20"), std::string::npos) << state;
  EXPECT_EQ(log.Count("event=restart_scheduled"), 1) << log.Joined();
  EXPECT_TRUE(fake.detached_);
}

// A supervisor SIGKILLed the moment it says a trainer started (a test that kills on that
// line, an OOM kill) comes back knowing of that start: the attempt count and the child are in
// state.json before the line is logged.
TEST_F(DriverTest, AStartIsOnDiskBeforeItIsLogged) {
  const auto job = Job();
  auto host = std::make_unique<FakeHost>(std::vector<Script>{
      {milliseconds(5), ExitStatus{1, 0}},
      {milliseconds(5), ExitStatus{0, 0}},
  });
  testing::LogCapture log;
  std::vector<nlohmann::json> on_disk;  // state.json as each trainer_started line is logged
  log.OnLine([&](const std::string& line) {
    if (line.find("event=trainer_started") == std::string::npos) return;
    std::ifstream in(job.telemetry.state_dir / "state.json");
    on_disk.push_back(nlohmann::json::parse(in, nullptr, /*allow_exceptions=*/false));
  });
  Driver driver(job, std::make_unique<SteppingSelector>(dir_ / "ckpt"), std::move(host));
  EXPECT_EQ(driver.Run(), Code(ExitCode::kDone)) << log.Joined();

  ASSERT_EQ(on_disk.size(), 2u) << log.Joined();
  for (std::size_t i = 0; i < on_disk.size(); ++i) {
    SCOPED_TRACE("start " + std::to_string(i + 1));
    ASSERT_TRUE(on_disk[i].is_object()) << "state.json missing or unreadable";
    EXPECT_EQ(on_disk[i].value("attempts", -1), static_cast<int>(i + 1)) << on_disk[i].dump();
    ASSERT_TRUE(on_disk[i]["child"].is_object()) << on_disk[i].dump();
    EXPECT_EQ(on_disk[i]["child"].value("pid", 0), 1001 + static_cast<int>(i)) << on_disk[i].dump();
  }
}

TEST_F(DriverTest, StopRequestReachesTheTrainerAndEndsResumable) {
  const auto job = Job();
  auto host = std::make_unique<FakeHost>(std::vector<Script>{
      {std::nullopt, {}, SIGTERM, ExitStatus{0, SIGTERM}, milliseconds(5)},
  });
  // A notice drains the trainer; the drained supervisor then waits for the machine to go.
  // SIGTERM to spotvisor ends that wait (as systemd does at shutdown): exit 75.
  host->signals_at = {{std::chrono::minutes(10), SIGTERM}};
  FakeHost& fake = *host;
  testing::LogCapture log;
  Driver driver(job, std::make_unique<SteppingSelector>(dir_ / "ckpt"), std::move(host));
  const int code = driver.Run();

  EXPECT_EQ(code, Code(ExitCode::kStopped)) << log.Joined();
  ASSERT_EQ(fake.spawns_.size(), 1u);
  ASSERT_FALSE(fake.signals_.empty());
  EXPECT_EQ(fake.signals_[0].first, SIGTERM);
  EXPECT_EQ(fake.group_kills_, 0) << "the trainer stopped within the grace";
  EXPECT_EQ(fake.watcher_ ? 1 : 0, 1);
  const auto attempts = Attempts(job);
  ASSERT_EQ(attempts.size(), 1u);
  EXPECT_NE(attempts[0].find("\"outcome\":\"preempted\""), std::string::npos) << attempts[0];
}

TEST_F(DriverTest, ATrainerThatIgnoresTheStopIsKilledAtTheEndOfTheGrace) {
  const auto job = Job();
  auto host = std::make_unique<FakeHost>(std::vector<Script>{
      {std::nullopt, {}, 0, {}, milliseconds(5)},
  });
  host->signals_at = {{std::chrono::minutes(10), SIGTERM}};  // the machine goes, long after the drain
  FakeHost& fake = *host;
  testing::LogCapture log;
  Driver driver(job, std::make_unique<SteppingSelector>(dir_ / "ckpt"), std::move(host));
  const int code = driver.Run();

  EXPECT_EQ(code, Code(ExitCode::kStopped)) << log.Joined();
  EXPECT_EQ(fake.group_kills_, 1) << log.Joined();
  EXPECT_EQ(log.Count("event=signal_sent signal=SIGKILL target=group"), 1) << log.Joined();
}

// The journal's times come from the host's wall clock (the seam), never from the system's:
// a host a day ahead writes attempts a day ahead.
TEST_F(DriverTest, TheJournalsTimesComeFromTheHostsWallClock) {
  const auto job = Job();
  auto host = std::make_unique<FakeHost>(std::vector<Script>{{milliseconds(5), ExitStatus{0, 0}}},
                                         std::chrono::system_clock::now() + std::chrono::hours(24));
  testing::LogCapture log;
  Driver driver(job, std::make_unique<SteppingSelector>(dir_ / "ckpt"), std::move(host));
  ASSERT_EQ(driver.Run(), Code(ExitCode::kDone)) << log.Joined();
  const auto attempts = Attempts(job);
  ASSERT_EQ(attempts.size(), 1u);
  const auto started = nlohmann::json::parse(attempts[0]).at("started_ms").get<std::int64_t>();
  const auto now_ms =
      std::chrono::duration_cast<milliseconds>(std::chrono::system_clock::now().time_since_epoch()).count();
  EXPECT_GT(started, now_ms + std::chrono::duration_cast<milliseconds>(std::chrono::hours(23)).count()) << attempts[0];
}

TEST_F(DriverTest, TheAttemptEndsOnlyOnceTheWholeGroupIsGone) {
  const auto job = Job();
  auto host = std::make_unique<FakeHost>(std::vector<Script>{
      {milliseconds(5), ExitStatus{0, 0}, 0, {}, std::nullopt, milliseconds(60'000)},
  });
  FakeHost& fake = *host;
  testing::LogCapture log;
  Driver driver(job, std::make_unique<SteppingSelector>(dir_ / "ckpt"), std::move(host));
  const int code = driver.Run();

  EXPECT_EQ(code, Code(ExitCode::kDone)) << log.Joined();
  // The lingering members got SIGKILL through the host; only then did the attempt end.
  ASSERT_FALSE(fake.group_signals_.empty());
  EXPECT_EQ(fake.group_signals_[0], std::make_pair(pid_t{1001}, SIGKILL));
  EXPECT_EQ(log.Count("event=group_leftovers"), 1) << log.Joined();
  EXPECT_EQ(Attempts(job).size(), 1u);
}

TEST_F(DriverTest, SpawnFailuresUseUpTheFailureBudget) {
  const auto job = Job();
  auto host = std::make_unique<FakeHost>(std::vector<Script>{});
  FakeHost& fake = *host;
  testing::LogCapture log;
  auto budget_job = job;
  budget_job.restart.max_restarts = 2;
  Driver driver(budget_job, std::make_unique<SteppingSelector>(dir_ / "ckpt"), std::move(host));
  const int code = driver.Run();

  EXPECT_EQ(code, Code(ExitCode::kFailed)) << log.Joined();
  EXPECT_TRUE(fake.spawns_.empty());
  // The first start and two restarts (max_restarts: 2), each refused by the host.
  EXPECT_EQ(log.Count("event=spawn_failed error=\"the test scripted no further trainer\""), 3) << log.Joined();
  const auto attempts = Attempts(budget_job);
  ASSERT_EQ(attempts.size(), 3u);
  for (const auto& line : attempts) EXPECT_NE(line.find("\"outcome\":\"spawn-failed\""), std::string::npos) << line;
  // Each refused start is an attempt of its own, numbered, with no pid (none was started).
  for (std::size_t i = 0; i < attempts.size(); ++i) {
    const auto record = nlohmann::json::parse(attempts[i]);
    EXPECT_EQ(record.at("attempt"), static_cast<int>(i + 1)) << attempts[i];
    EXPECT_EQ(record.at("pid"), 0) << attempts[i];
  }
}

// Multi-node (issue 14) through the driver: a peer's stop stops this trainer (exit 0 after
// it, as python/README.md suggests), and the node starts again in the next epoch with the
// group — never "done", never counted, never echoed back to the group.
TEST_F(DriverTest, APeersStopRestartsTheTrainerInTheNextEpochWithoutCounting) {
  const auto job = Job();
  auto host = std::make_unique<FakeHost>(std::vector<Script>{
      {std::nullopt, {}, SIGTERM, ExitStatus{0, 0}},
      {milliseconds(5), ExitStatus{0, 0}},
  });
  FakeHost& fake = *host;
  testing::LogCapture log;
  Driver driver(job, std::make_unique<SteppingSelector>(dir_ / "ckpt"), std::move(host));
  FakeCoordinator* group = nullptr;
  ASSERT_TRUE(
      driver.UseCoordinator([&group](asio::io_context& io, Clock& clock) -> Result<std::unique_ptr<Coordinator>> {
        auto made = std::make_unique<FakeCoordinator>(io, clock, milliseconds(20));
        group = made.get();
        return std::unique_ptr<Coordinator>(std::move(made));
      }));
  const int code = driver.Run();

  EXPECT_EQ(code, Code(ExitCode::kDone)) << log.Joined();
  ASSERT_EQ(fake.spawns_.size(), 2u);
  EXPECT_EQ(fake.signals_.at(0).first, SIGTERM);
  EXPECT_EQ(fake.spawns_[0].env.at("SPOTVISOR_EPOCH"), "1");
  EXPECT_EQ(fake.spawns_[1].env.at("SPOTVISOR_EPOCH"), "2");
  EXPECT_EQ(fake.spawns_[1].env.at("SPOTVISOR_NODE_RANK"), "1");
  EXPECT_EQ(fake.spawns_[1].env.at("SPOTVISOR_MASTER_ADDR"), "10.0.0.5");
  const auto attempts = Attempts(job);
  ASSERT_EQ(attempts.size(), 2u);
  EXPECT_NE(attempts[0].find("\"outcome\":\"peer-stopped\""), std::string::npos) << attempts[0];
  // The ledger, and so the report, names the node that stopped the group and why.
  EXPECT_NE(attempts[0].find("\"stopped_by\":\"node 0: notice: test\""), std::string::npos) << attempts[0];
  EXPECT_NE(attempts[1].find("\"outcome\":\"done\""), std::string::npos) << attempts[1];
  EXPECT_NE(attempts[1].find("\"stopped_by\":null"), std::string::npos) << attempts[1];
  EXPECT_EQ(log.Count("event=restart_scheduled"), 0) << log.Joined();  // no backoff: not a failure
  ASSERT_NE(group, nullptr);
  EXPECT_TRUE(group->published_.empty()) << group->published_.front();
  EXPECT_EQ(group->left_, 1);
  EXPECT_TRUE(group->finished_);
}

// Fencing through the driver: the coordinator says this node's lease lapsed; the driver
// samples the trainer's CPU for 2 s, the trainer (a fake that uses none) is judged blocked and
// stopped as for a peer's stop, uncounted, and the node starts again with the group.
TEST_F(DriverTest, ACutOffNodesIdleTrainerIsStoppedAfterTwoSecondsOfSampling) {
  const auto job = Job();
  auto host = std::make_unique<FakeHost>(std::vector<Script>{
      {std::nullopt, {}, SIGTERM, ExitStatus{0, 0}},
      {milliseconds(5), ExitStatus{0, 0}},
  });
  FakeHost& fake = *host;
  testing::LogCapture log;
  Driver driver(job, std::make_unique<SteppingSelector>(dir_ / "ckpt"), std::move(host));
  ASSERT_TRUE(driver.UseCoordinator([](asio::io_context& io, Clock& clock) -> Result<std::unique_ptr<Coordinator>> {
    return std::unique_ptr<Coordinator>(std::make_unique<FakeCoordinator>(io, clock, milliseconds(20), true));
  }));
  EXPECT_EQ(driver.Run(), Code(ExitCode::kDone)) << log.Joined();

  ASSERT_EQ(fake.spawns_.size(), 2u) << log.Joined();
  ASSERT_EQ(fake.signalled_at_.size(), 1u) << log.Joined();
  EXPECT_EQ(fake.signals_.at(0).first, SIGTERM);
  EXPECT_EQ(fake.signalled_at_[0] - fake.spawned_at_[0], milliseconds(20) + std::chrono::seconds(2));
  EXPECT_NE(log.Joined().find("this node is cut off from the group (its lease lapsed) and its trainer shows no "
                              "progress (0 ms of CPU in 2000 ms)"),
            std::string::npos)
      << log.Joined();
  const auto attempts = Attempts(job);
  ASSERT_EQ(attempts.size(), 2u);
  EXPECT_NE(attempts[0].find("\"outcome\":\"peer-stopped\""), std::string::npos) << attempts[0];
}

// Virtual time: 90 s of grace, then SIGKILL, to the millisecond, in a test that takes
// microseconds of real time.
TEST_F(DriverTest, NinetySecondsOfGraceThenSigkillExactly) {
  auto job = Job();
  job.signals.grace = std::chrono::seconds(90);
  job.signals.kill_timeout = std::chrono::seconds(30);
  auto host = std::make_unique<FakeHost>(std::vector<Script>{{std::nullopt, {}, 0, {}}});  // ignores every signal
  host->signals_at = {{std::chrono::minutes(5), SIGINT}};
  FakeHost& fake = *host;
  testing::LogCapture log;
  Driver driver(job, std::make_unique<SteppingSelector>(dir_ / "ckpt"), std::move(host));
  EXPECT_EQ(driver.Run(), Code(ExitCode::kStopped)) << log.Joined();

  ASSERT_EQ(fake.signalled_at_.size(), 1u) << log.Joined();
  EXPECT_EQ(fake.signals_[0].first, SIGTERM);
  EXPECT_EQ(fake.signalled_at_[0], fake.spawned_at_[0] + std::chrono::minutes(5));
  ASSERT_EQ(fake.killed_at_.size(), 1u) << log.Joined();
  EXPECT_EQ(fake.killed_at_[0] - fake.signalled_at_[0], std::chrono::seconds(90));
  EXPECT_GE(fake.clock_.elapsed(), std::chrono::minutes(6) + std::chrono::seconds(30));
}

// A notice while a launcher's workers still join the group: held, the launcher cannot serve
// their rendezvous store, so they block without CPU. After 5 s of that it runs again with
// no signal of its own (SIGCONT only), the workers save and stop, and the attempt ends
// resumable, long before the grace's SIGKILL.
TEST_F(DriverTest, ALauncherWhoseWorkersStallWhileHeldRunsAgainAfterFiveSeconds) {
  auto job = Job();
  job.signals.grace = std::chrono::seconds(90);
  job.signals.target = config::SignalTarget::kWorkers;
  Script launcher{std::nullopt, {}, 0, {}};  // the workers got SIGTERM; they stop once they can
  launcher.launcher_serves_workers = true;
  launcher.after_release = std::chrono::seconds(2);
  auto host = std::make_unique<FakeHost>(std::vector<Script>{launcher});
  host->signals_at = {{std::chrono::seconds(10), SIGTERM}};
  FakeHost& fake = *host;
  testing::LogCapture log;
  Driver driver(job, std::make_unique<SteppingSelector>(dir_ / "ckpt"), std::move(host));
  EXPECT_EQ(driver.Run(), Code(ExitCode::kStopped)) << log.Joined();

  ASSERT_EQ(fake.held_at_.size(), 1u) << log.Joined();
  ASSERT_EQ(fake.signals_.size(), 1u) << log.Joined();
  EXPECT_EQ(fake.signals_[0], std::make_pair(SIGTERM, config::SignalTarget::kWorkers));
  ASSERT_EQ(fake.released_.size(), 1u) << log.Joined();
  EXPECT_EQ(fake.released_[0].second, 0) << "released without a signal of its own";
  const auto stalled = fake.released_[0].first - fake.held_at_[0];
  EXPECT_GE(stalled, std::chrono::seconds(5));
  EXPECT_LE(stalled, std::chrono::milliseconds(5200));
  EXPECT_TRUE(fake.killed_at_.empty()) << log.Joined();
  EXPECT_NE(log.Joined().find("event=launcher_released reason=workers_stalled"), std::string::npos);
}

// A crash is restarted after restart.backoff.initial, then twice that: the restart delays
// are the Fsm's to the millisecond (no jitter here).
TEST_F(DriverTest, RestartsComeAfterTheBackoffExactly) {
  auto job = Job();
  job.restart.backoff.initial = std::chrono::seconds(30);
  job.restart.backoff.max = std::chrono::minutes(10);
  auto host = std::make_unique<FakeHost>(std::vector<Script>{
      {std::chrono::minutes(1), ExitStatus{1, 0}},
      {std::chrono::minutes(1), ExitStatus{1, 0}},
      {std::chrono::minutes(1), ExitStatus{0, 0}},
  });
  FakeHost& fake = *host;
  testing::LogCapture log;
  Driver driver(job, std::make_unique<SteppingSelector>(dir_ / "ckpt"), std::move(host));
  EXPECT_EQ(driver.Run(), Code(ExitCode::kDone)) << log.Joined();

  ASSERT_EQ(fake.spawned_at_.size(), 3u) << log.Joined();
  ASSERT_EQ(fake.exited_at_.size(), 3u) << log.Joined();
  EXPECT_EQ(fake.spawned_at_[1] - fake.exited_at_[0], std::chrono::seconds(30));
  EXPECT_EQ(fake.spawned_at_[2] - fake.exited_at_[1], std::chrono::seconds(60));
}

// A drained machine that is still there after provider.drained_timeout resumes the job.
TEST_F(DriverTest, ADrainedMachineThatStaysResumesAfterTheDrainedTimeout) {
  auto job = Job();
  job.provider.drained_timeout = std::chrono::minutes(15);
  auto host = std::make_unique<FakeHost>(std::vector<Script>{
      {std::nullopt, {}, SIGTERM, ExitStatus{0, SIGTERM}, std::chrono::minutes(2)},
      {std::chrono::minutes(1), ExitStatus{0, 0}},
  });
  FakeHost& fake = *host;
  testing::LogCapture log;
  Driver driver(job, std::make_unique<SteppingSelector>(dir_ / "ckpt"), std::move(host));
  EXPECT_EQ(driver.Run(), Code(ExitCode::kDone)) << log.Joined();

  ASSERT_EQ(fake.spawned_at_.size(), 2u) << log.Joined();
  EXPECT_EQ(fake.spawned_at_[1] - fake.exited_at_[0], std::chrono::minutes(15)) << log.Joined();
  EXPECT_EQ(log.Count("event=drained_timeout"), 1) << log.Joined();
  EXPECT_NE(fake.spawns_[1].argv.back(), "--train") << "resumed from the step the first trainer saved";
}

// The notice file gets the host's wall clock; the journal lives behind the host too: a full
// state dir is said once, supervision goes on, and the attempts it refused are written, in
// order, once it takes writes again.
TEST_F(DriverTest, AFullStateDirLosesNoAttemptAndTheNoticeFileHasTheHostsTime) {
  const auto job = Job();
  const WallTime wall_start = std::chrono::sys_days{std::chrono::year{2026} / 12 / 3} + std::chrono::hours(9);
  auto host = std::make_unique<FakeHost>(
      std::vector<Script>{
          {std::chrono::minutes(1), ExitStatus{1, 0}},
          {std::nullopt, {}, SIGTERM, ExitStatus{0, SIGTERM}, std::chrono::minutes(3)},
      },
      wall_start);
  host->state_in_memory = true;
  host->signals_at = {{std::chrono::minutes(10), SIGTERM}};  // before provider.drained_timeout's 30 min
  FakeHost& fake = *host;
  fake.at = {{std::chrono::seconds(1), [&fake] { fake.files_->full = true; }},
             {std::chrono::minutes(2), [&fake] { fake.files_->full = false; }}};
  testing::LogCapture log;
  Driver driver(job, std::make_unique<SteppingSelector>(dir_ / "ckpt"), std::move(host));
  EXPECT_EQ(driver.Run(), Code(ExitCode::kStopped)) << log.Joined();

  EXPECT_EQ(log.Count("event=state_write_failed"), 1) << log.Joined();
  EXPECT_EQ(log.Count("event=state_writable_again"), 1) << log.Joined();
  const auto& attempts = fake.files_->attempts_;
  ASSERT_EQ(attempts.size(), 2u) << log.Joined();
  EXPECT_EQ(attempts[0].outcome, "failed");
  EXPECT_EQ(attempts[1].outcome, "preempted");
  EXPECT_EQ(fake.files_->state().attempts, 2);
  ASSERT_TRUE(fake.files_->notice.has_value()) << log.Joined();
  const auto notice = nlohmann::json::parse(*fake.files_->notice);
  const auto seen = fake.spawned_at_[1] + std::chrono::minutes(3);  // virtual time of the notice
  EXPECT_EQ(notice.at("received_at"), preemption::FormatIso8601(wall_start + seen)) << notice.dump();
}

}  // namespace
}  // namespace spotvisor::supervisor

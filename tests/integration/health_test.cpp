// Hang detection and the no-progress give-up with a real trainer: the plain-Python example
// trainer (examples/plain_trainer/train.py, deterministic, exact resume). A hang is a
// SIGSTOP of the trainer (its heartbeat stops, as with a deadlocked collective); spotvisor
// must stop it, restart it from the newest good checkpoint, and end with the result of an
// uninterrupted run.
#include <gtest/gtest.h>
#include <signal.h>

#include <regex>

#include "support/plain_trainer.hpp"
#include "support/test_support.hpp"

namespace spotvisor {
namespace {

using namespace std::chrono_literals;
using testing::ReadFile;
using testing::Spawn;
using testing::TempDir;
using testing::TrainerJob;
using testing::TrainerPid;
using testing::UninterruptedDigest;
using testing::WaitExit;
using testing::WaitUntil;
using testing::WriteFile;

// Every job here restarts at once: the tests are about what a hang does, not the backoff.
constexpr const char* kQuickRestart = "  backoff: {initial: 1ms, max: 10ms, multiplier: 2, jitter: 0}\n";

// Runs the 120-step trainer under `health` (YAML lines), SIGSTOPs it once it has a
// checkpoint (its pulse stops, as with a deadlocked collective), and checks that the hang
// was detected, the trainer restarted from its checkpoint and the result is exact.
// Returns spotvisor's output for the caller's own checks.
std::string HangIsRestartedExactly(const TempDir& dir, const std::string& health) {
  const std::string expected = UninterruptedDigest(dir, "120");
  EXPECT_FALSE(expected.empty());
  WriteFile(dir / "job.yaml",
            TrainerJob(dir, {.extra = "health:\n" + health + "  hang_timeout: 2s\nrestart:\n  max_hangs: 2\n" +
                                      kQuickRestart}));
  auto sv = Spawn({SPOTVISOR_BINARY, "run", "--config", (dir / "job.yaml").string()}, dir / "out.txt");
  pid_t first = 0;
  EXPECT_TRUE(WaitUntil(
      [&] {
        first = TrainerPid(ReadFile(dir / "out.txt"), 1);
        return first != 0 && std::filesystem::exists(dir / "ckpt" / "ckpt_step20");
      },
      30s))
      << ReadFile(dir / "out.txt");
  if (first != 0) {
    EXPECT_EQ(kill(first, SIGSTOP), 0);
  }
  EXPECT_EQ(WaitExit(sv.pid, 60s), 0) << ReadFile(dir / "out.txt");
  const std::string out = ReadFile(dir / "out.txt");
  EXPECT_NE(out.find("event=hang_detected attempt=1"), std::string::npos) << out;
  EXPECT_NE(out.find("outcome=hang"), std::string::npos) << out;
  EXPECT_NE(TrainerPid(out, 2), 0) << out;
  EXPECT_NE(out.find("[trainer] resumed from="), std::string::npos) << out;
  EXPECT_EQ(ReadFile(dir / "result"), expected) << out;
  return out;
}

TEST(Health, HungTrainerIsRestartedFromItsLastCheckpointAndEndsExactly) {
  TempDir dir;
  const std::string out = HangIsRestartedExactly(dir, "  heartbeat_file: " + (dir / "heartbeat").string() + "\n");
  EXPECT_NE(out.find("event=hang_detected attempt=1 heartbeat_file="), std::string::npos) << out;
}

// The same hang seen through the trainer's output instead of a file: spotvisor relays
// stdout/stderr (nothing lost: every line still reaches our output) and takes a line that
// matches health.progress_pattern as the pulse, its group as the step.
TEST(Health, ProgressPatternOnTheOutputIsAPulse) {
  TempDir dir;
  const std::string out = HangIsRestartedExactly(dir, "  progress_pattern: \"^step=(\\\\d+) \"\n");
  EXPECT_NE(out.find("event=hang_detected attempt=1 progress_pattern="), std::string::npos) << out;
  EXPECT_TRUE(std::regex_search(out, std::regex("event=hang_detected .*last step [0-9]+"))) << out;
  EXPECT_NE(out.find("step=120 loss="), std::string::npos) << out;  // relayed to the end
  EXPECT_NE(out.find("[trainer] done"), std::string::npos) << out;
}

// A heartbeat left by an earlier attempt is no pulse: the hang clock starts with the
// trainer. Here the file is fresh from "before" and the trainer never beats.
TEST(Health, AStaleHeartbeatIsNoPulse) {
  TempDir dir;
  WriteFile(dir / "heartbeat", "old\n");
  WriteFile(dir / "job.yaml",
            "job:\n  name: s\n  command: [\"" + std::string(SPOTVISOR_CHILD_HELPER) +
                "\", \"--mode=checkpoint\"]\n"
                "signals:\n  grace: 1s\n  kill_timeout: 5s\n"
                "restart:\n  max_hangs: 0\n  backoff: {initial: 1ms, max: 10ms, multiplier: 2, jitter: 0}\n"
                "health:\n  heartbeat_file: " +
                (dir / "heartbeat").string() +
                "\n  hang_timeout: 500ms\n"
                "telemetry:\n  state_dir: ./state\n");
  std::string out;
  EXPECT_EQ(testing::RunSpotvisor({"run", "--config", (dir / "job.yaml").string()}, &out), 1) << out;
  EXPECT_NE(out.find("event=hang_detected attempt=1"), std::string::npos) << out;
  EXPECT_NE(out.find("no pulse since the trainer started"), std::string::npos) << out;
}

// The restart loop that never gets past its checkpoint: the trainer resumes, then crashes
// before its next checkpoint (here: its first heartbeat after the resume goes to a path
// that cannot be created).
TEST(Health, NoProgressGivesUpWithAMessageThatSaysSo) {
  TempDir dir;
  WriteFile(dir / "job.yaml",
            TrainerJob(
                dir, {.steps = "100000",
                      .step_sleep = "0.01",
                      .resume_extra = ", \"--heartbeat-file=/proc/spotvisor-no-such-dir/heartbeat\"",
                      .extra = std::string("restart:\n  no_progress_limit: 3\n  max_restarts: 50\n") + kQuickRestart}));
  auto sv = Spawn({SPOTVISOR_BINARY, "run", "--config", (dir / "job.yaml").string()}, dir / "out.txt");
  pid_t first = 0;
  ASSERT_TRUE(WaitUntil(
      [&] {
        first = TrainerPid(ReadFile(dir / "out.txt"), 1);
        return first != 0 && std::filesystem::exists(dir / "ckpt" / "ckpt_step10");
      },
      30s))
      << ReadFile(dir / "out.txt");
  kill(first, SIGKILL);  // the first attempt dies (say, the OOM killer); every resume then crashes
  EXPECT_EQ(WaitExit(sv.pid, 60s), 1) << ReadFile(dir / "out.txt");
  const std::string out = ReadFile(dir / "out.txt");
  EXPECT_NE(out.find("restarts in a row without progress"), std::string::npos) << out;
  EXPECT_NE(out.find("restart.no_progress_limit = 3"), std::string::npos) << out;
  EXPECT_NE(TrainerPid(out, 4), 0) << out;  // attempt 2 resumed from step 10; 3 and 4 from 10 again
  EXPECT_EQ(TrainerPid(out, 5), 0) << out;  // the third restart without progress is not started
}

}  // namespace
}  // namespace spotvisor

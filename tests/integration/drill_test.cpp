// `spotvisor drill` with the real plain-Python trainer: its scratch runs never touch the
// job's mirror or run its hooks (an on_finish may power the machine off), and a drill whose
// interruption never landed proves nothing: `inconclusive`, exit 1, never `identical`.
#include <gtest/gtest.h>

#include "support/plain_trainer.hpp"
#include "support/test_support.hpp"

namespace spotvisor {
namespace {

using namespace std::chrono_literals;
using testing::RunSpotvisor;
using testing::TempDir;
using testing::TrainerJob;
using testing::WriteFile;

TEST(Drill, ScratchRunsLeaveTheMirrorAndTheHooksAlone) {
  TempDir dir;
  const auto marker = (dir / "hook-ran").string();
  const std::string hook = "{command: [\"/bin/sh\", \"-c\", \"touch " + marker + "\"], timeout: 5s}";
  // The mirror goes into the checkpoints section TrainerJob writes (after its dir line).
  WriteFile(dir / "job.yaml",
            TrainerJob(dir, {.steps = "60", .step_sleep = "0.02",
                             .extra = "hooks:\n  before_start: " + hook + "\n  on_finish: " + hook + "\n",
                             .checkpoint_dir = "./ckpt\n  mirror:\n    path: " + (dir / "mirror").string()}));
  std::string out;
  ASSERT_EQ(RunSpotvisor({"drill", "--config", (dir / "job.yaml").string(), "--kind", "sigterm", "--interruptions", "1",
                          "--seed", "7", "--scratch", (dir / "scratch").string()},
                         &out, 300s),
            0)
      << out;
  EXPECT_NE(out.find("the job's mirror is not used (no restore, no upload) and no hook runs"), std::string::npos) << out;
  EXPECT_NE(out.find("\nidentical\n"), std::string::npos) << out;
  EXPECT_FALSE(std::filesystem::exists(marker)) << "a hook ran during the drill";
  EXPECT_TRUE(!std::filesystem::exists(dir / "mirror") || std::filesystem::is_empty(dir / "mirror"))
      << "the drill uploaded to the job's mirror";
}

TEST(Drill, AnInterruptionThatNeverLandedIsInconclusive) {
  TempDir dir;
  // Done before any interruption can fire: nothing is ever interrupted.
  WriteFile(dir / "job.yaml", "job:\n  name: quick\n  command: [\"/bin/true\"]\ncheckpoints:\n  dir: ./ckpt\n"
                              "telemetry:\n  state_dir: ./state\n");
  std::string out;
  EXPECT_EQ(RunSpotvisor({"drill", "--config", (dir / "job.yaml").string(), "--kind", "sigterm", "--interruptions", "1",
                          "--scratch", (dir / "scratch").string()},
                         &out, 120s),
            1)
      << out;
  EXPECT_NE(out.find("0 of 1 interruptions landed"), std::string::npos) << out;
  EXPECT_NE(out.find("\ninconclusive\n"), std::string::npos) << out;
  EXPECT_EQ(out.find("\nidentical\n"), std::string::npos) << out;
}

}  // namespace
}  // namespace spotvisor

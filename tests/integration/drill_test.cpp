// `spotvisor drill` with the real plain-Python trainer: its scratch runs never touch the
// job's mirror, metrics port or report, nor run its hooks (an on_finish may power the machine off), and a drill whose
// interruption never landed proves nothing: `inconclusive`, exit 1, never `identical`.
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include "support/plain_trainer.hpp"
#include "support/test_support.hpp"

namespace spotvisor {
namespace {

using namespace std::chrono_literals;
using testing::RunSpotvisor;
using testing::TempDir;
using testing::TrainerJob;
using testing::WriteFile;

TEST(Drill, ScratchRunsLeaveTheMirrorHooksMetricsPortAndReportAlone) {
  TempDir dir;
  const auto marker = (dir / "hook-ran").string();
  const std::string hook = "{command: [\"/bin/sh\", \"-c\", \"touch " + marker + "\"], timeout: 5s}";
  // The job's metrics port is held (as the real run would hold it): a scratch run that
  // tried to listen there could not start.
  const int held = socket(AF_INET, SOCK_STREAM, 0);
  ASSERT_GE(held, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof addr;
  ASSERT_EQ(bind(held, reinterpret_cast<sockaddr*>(&addr), sizeof addr), 0);
  ASSERT_EQ(listen(held, 1), 0);
  ASSERT_EQ(getsockname(held, reinterpret_cast<sockaddr*>(&addr), &len), 0);
  const std::string port = std::to_string(ntohs(addr.sin_port));
  // 300 steps of 20 ms: the interruption (at 20-80 % of the uninterrupted run) must land
  // inside training however slow the start (under ASan it once came as the job finished).
  // The mirror goes into the checkpoints section TrainerJob writes (after its dir line), the
  // metrics and report into its telemetry section (after state_dir).
  WriteFile(dir / "job.yaml",
            TrainerJob(dir, {.steps = "300",
                             .step_sleep = "0.02",
                             .extra = "hooks:\n  before_start: " + hook + "\n  on_finish: " + hook + "\n",
                             .checkpoint_dir = "./ckpt\n  mirror:\n    path: " + (dir / "mirror").string(),
                             .state_dir = "./state\n  metrics:\n    listen: 127.0.0.1:" + port +
                                          "\n  report_path: " + (dir / "job-report.md").string()}));
  std::string out;
  ASSERT_EQ(RunSpotvisor({"drill", "--config", (dir / "job.yaml").string(), "--kind", "sigterm", "--interruptions", "1",
                          "--seed", "7", "--scratch", (dir / "scratch").string()},
                         &out, 300s),
            0)
      << out;
  close(held);
  EXPECT_NE(
      out.find("the job's mirror is not used (no restore, no upload), no hook runs, and no metrics port is opened"),
      std::string::npos)
      << out;
  EXPECT_FALSE(std::filesystem::exists(dir / "job-report.md")) << "a scratch run wrote the job's report";
  int logs = 0;
  for (const auto& e : std::filesystem::recursive_directory_iterator(dir / "scratch")) {
    if (e.path().filename() != "supervisor.log") continue;
    ++logs;
    const std::string log = testing::ReadFile(e.path());
    EXPECT_EQ(log.find("event=metrics_"), std::string::npos) << "a scratch run tried the job's metrics port:\n" << log;
  }
  EXPECT_EQ(logs, 2);  // the uninterrupted lane and the interrupted one
  EXPECT_NE(out.find("\nidentical\n"), std::string::npos) << out;
  EXPECT_FALSE(std::filesystem::exists(marker)) << "a hook ran during the drill";
  EXPECT_TRUE(!std::filesystem::exists(dir / "mirror") || std::filesystem::is_empty(dir / "mirror"))
      << "the drill uploaded to the job's mirror";
}

TEST(Drill, AnInterruptionThatNeverLandedIsInconclusive) {
  TempDir dir;
  // Done before any interruption can fire: nothing is ever interrupted.
  WriteFile(dir / "job.yaml",
            "job:\n  name: quick\n  command: [\"/bin/true\"]\ncheckpoints:\n  dir: ./ckpt\n"
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

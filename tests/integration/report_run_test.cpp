// Whole runs with telemetry: the budget stops a run with exit 3 and the on_finish hook
// sees it; hooks fire on a notice and a checkpoint, a hanging one is killed; the report is
// written at the end and by `spotvisor report` (also against a baseline); refusals
// (exposed metrics without a token, a world-readable or missing token file) are controlled
// and reveal no secret; --print-config redacts.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/stat.h>

#include <nlohmann/json.hpp>

#include "support/test_support.hpp"

namespace spotvisor {
namespace {

using namespace std::chrono_literals;
using testing::ReadFile;
using testing::RunSpotvisor;
using testing::Spawn;
using testing::TempDir;
using testing::WaitExit;
using testing::WaitUntil;
using testing::WriteFile;

constexpr const char* kToken = "tok-a81d55e0c9b34f61";

std::string Helper(const std::string& args) {
  std::string out = "[\"" + std::string(SPOTVISOR_CHILD_HELPER) + "\"";
  std::string rest = args;
  while (!rest.empty()) {
    const auto space = rest.find(' ');
    out += ", \"" + rest.substr(0, space) + "\"";
    rest = space == std::string::npos ? "" : rest.substr(space + 1);
  }
  return out + "]";
}

TEST(ReportRun, BudgetExhaustedStopsWithExit3AndRunsOnFinish) {
  TempDir dir;
  WriteFile(
      dir / "job.yaml",
      "job:\n  name: budget\n  command: " + Helper("--mode=checkpoint --ckpt-dir=" + (dir / "ckpt").string()) +
          "\n"
          "checkpoints:\n  dir: ./ckpt\n  pattern: \"ckpt_step{step}\"\n  validate: structure\n  format: any\n"
          "signals:\n  grace: 5s\n"
          "telemetry:\n  state_dir: ./state\n"
          // Only the upper end of the price range reaches the budget: the upper end counts.
          "cost:\n  node_hour: [0, 3600]\n  disk_gb: 0\n  disk_gb_month: 0\n  snapshot_gb: 0\n  snapshot_gb_month: 0\n"
          "  egress_gb: 0\n  egress_per_gb: 0\n  public_ip_hour: 0\n  support_month: [0, 1]\n"
          "  budget: 1.5\n  warn_fraction: 0.5\n  check_interval: 100ms\n"
          "hooks:\n  on_finish: {command: [\"/bin/sh\", \"-c\", \"echo $0 > " +
          (dir / "finished").string() + "\", \"{exit_code}\"], timeout: 5s}\n");
  std::string out;
  EXPECT_EQ(RunSpotvisor({"run", "--config", (dir / "job.yaml").string()}, &out, 30s), 3) << out;
  EXPECT_NE(out.find("event=budget_warning"), std::string::npos) << out;
  EXPECT_NE(out.find("event=budget_exhausted"), std::string::npos) << out;
  EXPECT_LT(out.find("event=budget_warning"), out.find("event=budget_exhausted"));
  EXPECT_EQ(ReadFile(dir / "finished"), "3\n");
  // The trainer was asked to checkpoint and stop: its SIGTERM checkpoint exists.
  EXPECT_TRUE(std::filesystem::exists(dir / "ckpt")) << out;
  const auto report = nlohmann::json::parse(ReadFile(dir / "state" / "report.json"));
  EXPECT_EQ(report["result"]["exit_code"], 3);
  EXPECT_FALSE(report["cost"]["budget_exhausted"].get<std::string>().empty());
  EXPECT_GE(report["cost"]["known_high"].get<double>(), 1.5 * 0.5);
  EXPECT_LT(report["cost"]["total_low"].get<double>(), 1.5) << report["cost"].dump();
  EXPECT_EQ(report["config_hash"].get<std::string>().rfind("xxh3-128:", 0), 0u) << report.dump();
  EXPECT_EQ(report["spotvisor_version"], SPOTVISOR_VERSION);
  EXPECT_FALSE(report["host"]["hostname"].get<std::string>().empty()) << report["host"].dump();
  EXPECT_FALSE(report["host"]["provider"].get<std::string>().empty()) << report["host"].dump();
  EXPECT_NE(ReadFile(dir / "state" / "report.md").find("# Run report: budget"), std::string::npos);
}

// on_finish runs for every end that is final — done (0) and given up (1) — not for a stop
// that leaves the job resumable (75).
TEST(ReportRun, OnFinishRunsWhenTheJobIsDoneOrGivenUp) {
  for (const auto& [helper, code] :
       std::vector<std::pair<std::string, int>>{{"--mode=exit --code=0", 0}, {"--mode=exit --code=3", 1}}) {
    TempDir dir;
    WriteFile(dir / "job.yaml",
              "job:\n  name: fin\n  command: " + Helper(helper) +
                  "\n"
                  "restart:\n  max_restarts: 1\n  backoff: {initial: 1ms, max: 1ms, multiplier: 1, jitter: 0}\n"
                  "telemetry:\n  state_dir: ./state\n"
                  "hooks:\n  on_finish: {command: [\"/bin/sh\", \"-c\", \"echo $0 > " +
                  (dir / "finished").string() + "\", \"{exit_code}\"], timeout: 5s}\n");
    std::string out;
    EXPECT_EQ(RunSpotvisor({"run", "--config", (dir / "job.yaml").string()}, &out), code) << out;
    EXPECT_EQ(ReadFile(dir / "finished"), std::to_string(code) + "\n") << out;
  }
}

TEST(ReportRun, HooksOnNoticeAndCheckpointAndAHangingHookIsKilled) {
  TempDir dir;
  const auto trigger = dir / "preempt";
  WriteFile(
      dir / "job.yaml",
      "job:\n  name: hooks\n  command: " +
          Helper("--mode=checkpoint --ready=" + (dir / "ready").string() + " --ckpt-dir=" + (dir / "ckpt").string()) +
          "\n"
          "provider:\n  kind: file\n  file: " +
          trigger.string() +
          "\n  poll_interval: 50ms\n"
          "checkpoints:\n  dir: ./ckpt\n  pattern: \"ckpt_step{step}\"\n  validate: structure\n  format: any\n"
          "signals:\n  grace: 5s\n"
          "telemetry:\n  state_dir: ./state\n"
          "hooks:\n"
          "  before_start: {command: [\"/bin/sh\", \"-c\", \"echo restored > " +
          (dir / "before").string() +
          "\"], timeout: 5s}\n"
          "  on_checkpoint: {command: [\"/bin/sh\", \"-c\", \"echo $0 >> " +
          (dir / "checkpoints").string() +
          "\", \"{step}\"], timeout: 5s}\n"
          "  on_notice: {command: [\"/bin/sh\", \"-c\", \"trap '' TERM; echo $0 > " +
          (dir / "notice").string() + "; sleep 60\", \"{provider}-{notice_kind}\"], timeout: 300ms}\n");
  auto run = Spawn({SPOTVISOR_BINARY, "run", "--config", (dir / "job.yaml").string()}, dir / "out.log");
  ASSERT_TRUE(WaitUntil([&] { return ReadFile(dir / "out.log").find("event=trainer_started") != std::string::npos; }))
      << ReadFile(dir / "out.log");
  EXPECT_EQ(ReadFile(dir / "before"), "restored\n");                               // before the trainer started
  ASSERT_TRUE(WaitUntil([&] { return std::filesystem::exists(dir / "ready"); }));  // its handlers are set
  kill(run.pid, SIGUSR1);  // "checkpoint now": the helper writes one; the tracker validates it
  ASSERT_TRUE(WaitUntil([&] { return !ReadFile(dir / "checkpoints").empty(); }, 20s)) << ReadFile(dir / "out.log");
  WriteFile(trigger, "{\"reason\": \"test\"}");
  // Drained: the machine did not go away; systemd's SIGTERM ends the wait (75, resumable).
  ASSERT_TRUE(WaitUntil([&] { return ReadFile(dir / "out.log").find("event=drained ") != std::string::npos; }))
      << ReadFile(dir / "out.log");
  ASSERT_TRUE(WaitUntil([&] {
    return ReadFile(dir / "out.log").find("hook=on_notice outcome=timeout") != std::string::npos;
  })) << ReadFile(dir / "out.log");
  kill(run.pid, SIGTERM);
  EXPECT_EQ(WaitExit(run.pid), 75) << ReadFile(dir / "out.log");
  const std::string log = ReadFile(dir / "out.log");
  EXPECT_EQ(ReadFile(dir / "notice"), "file-file\n") << log;
  EXPECT_NE(log.find("event=hook_timeout hook=on_notice"), std::string::npos) << log;
  EXPECT_NE(log.find("event=hook_failed hook=on_notice outcome=timeout"), std::string::npos) << log;
  const auto report = nlohmann::json::parse(ReadFile(dir / "state" / "report.json"));
  EXPECT_EQ(report["hooks"]["failures"]["on_notice"], 1);
  EXPECT_EQ(report["notices"].size(), 1u);
  EXPECT_GE(report["checkpoints"]["good"].get<int>(), 1);

  // On demand, and side by side with a baseline.
  std::string md, js, cmp;
  EXPECT_EQ(RunSpotvisor({"report", (dir / "state").string()}, &md), 0) << md;
  EXPECT_NE(md.find("## Notices"), std::string::npos) << md;
  EXPECT_EQ(RunSpotvisor({"report", (dir / "state").string(), "--json"}, &js), 0);
  EXPECT_NE(js.find("\"report_version\": 2"), std::string::npos) << js;
  EXPECT_EQ(RunSpotvisor({"report", (dir / "state").string(), "--baseline", (dir / "state").string()}, &cmp), 0);
  EXPECT_NE(cmp.find("| goodput |"), std::string::npos) << cmp;
  std::string none;
  EXPECT_EQ(RunSpotvisor({"report", (dir / "nothing").string()}, &none), 1);
  EXPECT_NE(none.find("holds no run"), std::string::npos) << none;
}

TEST(ReportRun, RefusalsAreControlledAndRevealNoSecret) {
  TempDir dir;
  WriteFile(dir / "token", std::string(kToken) + "\n");
  chmod((dir / "token").c_str(), 0644);
  const std::string base = "job:\n  command: [\"/bin/true\"]\n  env: {API_TOKEN: \"" + std::string(kToken) +
                           "\"}\n"
                           "telemetry:\n  state_dir: ./state\n";
  std::string out;
  WriteFile(dir / "world.yaml", base + "  metrics: {listen: \"127.0.0.1:0\", token_file: ./token}\n");
  EXPECT_EQ(RunSpotvisor({"run", "--config", (dir / "world.yaml").string()}, &out), 78) << out;
  EXPECT_NE(out.find("accessible by group or others"), std::string::npos) << out;
  EXPECT_NE(out.find((dir / "token").string()), std::string::npos) << out;
  EXPECT_EQ(out.find(kToken), std::string::npos) << out;

  WriteFile(dir / "exposed.yaml", base + "  metrics: {listen: \"0.0.0.0:0\"}\n");
  EXPECT_EQ(RunSpotvisor({"run", "--config", (dir / "exposed.yaml").string()}, &out), 78) << out;
  EXPECT_NE(out.find("not a loopback address"), std::string::npos) << out;

  WriteFile(dir / "missing.yaml", base + "  metrics: {listen: \"127.0.0.1:0\", token_file: ./absent}\n");
  EXPECT_EQ(RunSpotvisor({"run", "--config", (dir / "missing.yaml").string()}, &out), 78) << out;
  EXPECT_NE(out.find("cannot read the metrics token file " + (dir / "absent").string()), std::string::npos) << out;

  chmod((dir / "token").c_str(), 0600);
  EXPECT_EQ(RunSpotvisor({"run", "--config", (dir / "world.yaml").string(), "--print-config"}, &out), 0) << out;
  EXPECT_EQ(out.find(kToken), std::string::npos) << out;
  EXPECT_NE(out.find("<redacted>"), std::string::npos) << out;
  EXPECT_EQ(RunSpotvisor({"run", "--config", (dir / "world.yaml").string()}, &out), 0) << out;
  EXPECT_EQ(out.find(kToken), std::string::npos) << out;
  for (const auto& e : std::filesystem::recursive_directory_iterator(dir / "state")) {
    if (e.is_regular_file()) {
      EXPECT_EQ(ReadFile(e.path()).find(kToken), std::string::npos) << e.path();
    }
  }
}

}  // namespace
}  // namespace spotvisor

// Kubernetes and SLURM homes (issue 15): the keys that shape a stop (job.stop_exit_code,
// signals.stop_on, telemetry.termination_log, slurm.*), the termination message's 4 KiB
// bound however long its fields, and what a SLURM job's environment tells spotvisor.
#include <gtest/gtest.h>

#include <csignal>
#include <fstream>
#include <nlohmann/json.hpp>

#include "spotvisor/config/loader.hpp"
#include "spotvisor/platform/slurm.hpp"
#include "spotvisor/report/termination_message.hpp"
#include "support/test_support.hpp"

namespace spotvisor {
namespace {

using nlohmann::json;
using testing::TempDir;
using testing::WriteFile;

Result<config::JobConfig> Load(const TempDir& dir, const std::string& yaml) {
  WriteFile(dir / "job.yaml", "job:\n  command: [\"/bin/true\"]\n" + yaml);
  auto job = config::LoadJobFile(dir / "job.yaml");
  if (!job) return job;
  if (Status s = config::Finalize(*job); !s) return s.error();
  return job;
}

TEST(PlatformConfig, DefaultsKeepTheSystemdContract) {
  TempDir dir;
  auto job = Load(dir, "");
  ASSERT_TRUE(job) << job.error().message;
  EXPECT_EQ(job->job.stop_exit_code, 75);
  EXPECT_EQ(job->signals.stop_on, (std::vector<int>{SIGTERM, SIGINT, SIGHUP}));
  EXPECT_FALSE(job->telemetry.termination_log.has_value());
  EXPECT_EQ(job->slurm.requeue_on, (std::vector<int>{config::kRequeueOnNotice, SIGUSR1, SIGUSR2}));
  EXPECT_EQ(job->slurm.scontrol, "scontrol");
  const std::string yaml = config::ToYaml(*job);
  EXPECT_NE(yaml.find("stop_exit_code: 75"), std::string::npos) << yaml;
  EXPECT_NE(yaml.find("stop_on: [SIGTERM, SIGINT, SIGHUP]"), std::string::npos) << yaml;
  EXPECT_NE(yaml.find("# telemetry.termination_log: not set"), std::string::npos) << yaml;
  EXPECT_NE(yaml.find("requeue_on: [notice, SIGUSR1, SIGUSR2]"), std::string::npos) << yaml;
}

TEST(PlatformConfig, ReadsTheKubernetesAndSlurmKeys) {
  TempDir dir;
  auto job = Load(dir,
                  "  stop_exit_code: 143\n"
                  "signals:\n  stop_on: [SIGTERM, USR2]\n"
                  "telemetry:\n  termination_log: /dev/termination-log\n"
                  "slurm:\n  requeue_on: [notice, SIGTERM]\n  scontrol: /usr/bin/scontrol\n");
  ASSERT_TRUE(job) << job.error().message;
  EXPECT_EQ(job->job.stop_exit_code, 143);
  EXPECT_EQ(job->signals.stop_on, (std::vector<int>{SIGTERM, SIGUSR2}));
  EXPECT_EQ(*job->telemetry.termination_log, "/dev/termination-log");
  EXPECT_EQ(job->slurm.requeue_on, (std::vector<int>{config::kRequeueOnNotice, SIGTERM}));
  EXPECT_EQ(job->slurm.scontrol, "/usr/bin/scontrol");
  // What print-config shows reads back to the same values.
  TempDir again;
  WriteFile(again / "job.yaml", config::ToYaml(*job));
  auto reread = config::LoadJobFile(again / "job.yaml");
  ASSERT_TRUE(reread) << reread.error().message;
  EXPECT_EQ(reread->job.stop_exit_code, 143);
  EXPECT_EQ(reread->signals.stop_on, job->signals.stop_on);
  EXPECT_EQ(reread->slurm.requeue_on, job->slurm.requeue_on);
  EXPECT_EQ(*reread->telemetry.termination_log, "/dev/termination-log");
}

TEST(PlatformConfig, RefusesStopCodesThatReadAsSomethingElse) {
  TempDir dir;
  for (const auto& [code, words] : std::vector<std::pair<std::string, std::string>>{{"137", "OOMKilled"},
                                                                                    {"1", "already means"},
                                                                                    {"3", "already means"},
                                                                                    {"78", "already means"},
                                                                                    {"0", "job.stop_exit_code"},
                                                                                    {"256", "job.stop_exit_code"}}) {
    auto job = Load(dir, "  stop_exit_code: " + code + "\n");
    ASSERT_FALSE(job) << code;
    EXPECT_NE(job.error().message.find(words), std::string::npos) << job.error().message;
    EXPECT_NE(job.error().message.find("job.yaml"), std::string::npos) << job.error().message;
  }
}

TEST(PlatformConfig, RefusesStopSignalsThatCannotMeanStop) {
  TempDir dir;
  for (const std::string list : {"[SIGKILL]", "[SIGCHLD]", "[]", "[SIGTERM, SIGCONT]"}) {
    auto job = Load(dir, "signals:\n  stop_on: " + list + "\n");
    ASSERT_FALSE(job) << list;
    EXPECT_NE(job.error().message.find("signals.stop_on"), std::string::npos) << job.error().message;
  }
  auto bad = Load(dir, "slurm:\n  requeue_on: [later]\n");
  ASSERT_FALSE(bad);
  EXPECT_NE(bad.error().message.find("slurm.requeue_on"), std::string::npos) << bad.error().message;
}

json SampleReport(const std::string& job_name) {
  return json{
      {"job", job_name},
      {"attempts", json::array({json{{"outcome", "preempted"}}, json{{"outcome", "stopped"}}})},
      {"restarts", json{{"preempted", 1}}},
      {"checkpoints", json{{"newest_good_step", 300}}},
      {"cost", json{{"currency", "USD"}, {"total_low", 1.5}, {"total_high", 2.25}, {"total_text", "1.50-2.25 USD"}}}};
}

TEST(TerminationMessage, OneJsonLineWithWhyCodeAttemptsCheckpointAndCost) {
  const std::string line = report::TerminationMessage(143, "stopped on request", SampleReport("llama"), "ckpt_step300");
  ASSERT_FALSE(line.empty());
  EXPECT_EQ(line.back(), '\n');
  EXPECT_EQ(line.find('\n'), line.size() - 1);
  const json m = json::parse(line);
  EXPECT_EQ(m["exit_code"], 143);
  EXPECT_EQ(m["why"], "stopped on request");
  EXPECT_EQ(m["job"], "llama");
  EXPECT_EQ(m["attempts"], 2);
  EXPECT_EQ(m["last_outcome"], "stopped");
  EXPECT_EQ(m["restarts"]["preempted"], 1);
  EXPECT_EQ(m["checkpoint"]["name"], "ckpt_step300");
  EXPECT_EQ(m["checkpoint"]["step"], 300);
  EXPECT_DOUBLE_EQ(m["cost"]["low"].get<double>(), 1.5);
  EXPECT_DOUBLE_EQ(m["cost"]["high"].get<double>(), 2.25);
  const json bare = json::parse(report::TerminationMessage(1, "no run", nullptr, ""));
  EXPECT_EQ(bare, (json{{"exit_code", 1}, {"why", "no run"}}));
}

TEST(TerminationMessage, NeverExceedsFourKibEvenWithHugeFields) {
  const std::string huge(100000, 'x');
  std::string controls;  // each escapes to 6 bytes in JSON
  for (int i = 0; i < 20000; ++i) controls += static_cast<char>(1 + i % 8);
  std::string utf8;
  for (int i = 0; i < 20000; ++i) utf8 += "\xc3\xa9";  // "é": must not be cut in half
  for (const auto& [why, name, ckpt] : std::vector<std::tuple<std::string, std::string, std::string>>{
           {huge, huge, huge}, {controls, "j", "c"}, {utf8, utf8, utf8}, {"short", huge, ""}}) {
    const std::string line = report::TerminationMessage(200, why, SampleReport(name), ckpt);
    EXPECT_LE(line.size(), report::kTerminationMessageLimit);
    EXPECT_GT(line.size(), 1000u);     // shortened, not emptied
    const json m = json::parse(line);  // still valid JSON (and valid UTF-8)
    EXPECT_EQ(m["exit_code"], 200);
    EXPECT_TRUE(m.contains("why"));
    EXPECT_EQ(m["attempts"], 2);
  }
  // A tiny limit still gives a parseable line with the exit code.
  const std::string tiny = report::TerminationMessage(200, huge, SampleReport(huge), huge, 64);
  EXPECT_LE(tiny.size(), 64u);
  EXPECT_EQ(json::parse(tiny)["exit_code"], 200);
}

TEST(TerminationMessage, WritesInPlaceWithoutRenaming) {
  TempDir dir;
  const auto path = dir / "termination-log";
  WriteFile(path, std::string(9000, 'o'));  // the runtime's file, longer than ours
  const auto inode_before = std::filesystem::status(path).permissions();
  ASSERT_TRUE(report::WriteTerminationLog(path, "{\"exit_code\":143}\n"));
  std::ifstream in(path);
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  EXPECT_EQ(text, "{\"exit_code\":143}\n");
  EXPECT_EQ(std::filesystem::status(path).permissions(), inode_before);
  auto bad = report::WriteTerminationLog(dir / "no-such-dir" / "log", "x");
  ASSERT_FALSE(bad);
  EXPECT_NE(bad.error().message.find("no-such-dir/log"), std::string::npos);
}

TEST(SlurmJob, ReadsIdRestartCountAndOpenMode) {
  EXPECT_FALSE(platform::SlurmJobFrom({}).has_value());
  EXPECT_FALSE(platform::SlurmJobFrom({{"SLURM_JOB_ID", ""}}).has_value());
  auto first = platform::SlurmJobFrom({{"SLURM_JOB_ID", "42"}});
  ASSERT_TRUE(first);
  EXPECT_EQ(first->job_id, "42");
  EXPECT_FALSE(first->restart_count.has_value());
  auto again = platform::SlurmJobFrom({{"SLURM_JOB_ID", "42"}, {"SLURM_RESTART_COUNT", "3"}, {"SLURM_OPEN_MODE", "a"}});
  ASSERT_TRUE(again);
  EXPECT_EQ(again->restart_count, 3);
  EXPECT_EQ(again->open_mode, "a");
  EXPECT_FALSE(platform::SlurmJobFrom({{"SLURM_JOB_ID", "1"}, {"SLURM_RESTART_COUNT", "x"}})->restart_count);
}

TEST(SlurmJob, WarnsWhenARequeueWouldTruncateTheOutput) {
  platform::SlurmJob job{"42", std::nullopt, ""};
  EXPECT_NE(platform::TruncationWarning(job, std::nullopt).find("--open-mode=append"), std::string::npos);
  EXPECT_NE(platform::TruncationWarning(job, false).find("O_APPEND"), std::string::npos);
  EXPECT_EQ(platform::TruncationWarning(job, true), "");
  job.open_mode = "a";
  EXPECT_EQ(platform::TruncationWarning(job, std::nullopt), "");
  EXPECT_NE(platform::TruncationWarning(job, false), "");  // the file itself says truncate
}

}  // namespace
}  // namespace spotvisor

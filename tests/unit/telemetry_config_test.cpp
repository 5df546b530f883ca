// Every example job in config/ loads and finalizes; the keys this module adds (cost,
// hooks, job.labels, telemetry.fingerprint_files) parse, refuse mistakes by file:line:key,
// and survive --print-config.
#include <gtest/gtest.h>

#include "spotvisor/config/loader.hpp"

namespace spotvisor::config {
namespace {

TEST(ConfigExamples, EveryExampleJobLoadsAndFinalizes) {
  int count = 0;
  for (const auto& entry :
       std::filesystem::directory_iterator(std::filesystem::path(SPOTVISOR_SOURCE_DIR) / "config")) {
    if (entry.path().extension() != ".yaml") continue;
    ++count;
    auto job = LoadJobFile(entry.path());
    ASSERT_TRUE(job) << job.error().message;
    Status s = Finalize(*job);
    EXPECT_TRUE(s) << entry.path() << ": " << (s ? "" : s.error().message);
    EXPECT_TRUE(job->cost.configured) << entry.path();
    auto again = LoadJobText(ToYaml(*job), "printed", job->base_dir);
    ASSERT_TRUE(again) << entry.path() << ": " << again.error().message << "\n" << ToYaml(*job);
    ASSERT_TRUE(Finalize(*again)) << entry.path();  // (what signals.target: auto chose is a comment)
    EXPECT_EQ(ToYaml(*again), ToYaml(*job)) << entry.path();
  }
  EXPECT_GE(count, 5);
}

Result<JobConfig> Load(const std::string& yaml) { return LoadJobText(yaml, "job.yaml", "/tmp"); }

TEST(ConfigCost, ValuesRangesAndUnknowns) {
  auto job = Load(
      "cost:\n  gpu_hour: 2.5\n  gpus: 8\n  egress_gb: [1, 3]\n  support_month: unknown\n  budget: 9\n"
      "  other_hour: {nat: 0.05}\n  unknown: [snapshots]\n  billing_from: boot\n");
  ASSERT_TRUE(job) << job.error().message;
  EXPECT_TRUE(job->cost.gpu_hour.known);
  EXPECT_EQ(job->cost.gpu_hour.low, 2.5);
  EXPECT_EQ(job->cost.gpus, 8);
  EXPECT_EQ(job->cost.egress_gb.low, 1);
  EXPECT_EQ(job->cost.egress_gb.high, 3);
  EXPECT_FALSE(job->cost.support_month.known);
  EXPECT_FALSE(job->cost.disk_gb.known);  // unset = unknown, never 0
  EXPECT_TRUE(job->cost.bill_from_boot);
  EXPECT_EQ(job->cost.other_hour.at("nat").low, 0.05);
}

TEST(ConfigCost, MistakesNameFileLineAndKey) {
  auto both = Load("cost:\n  gpu_hour: 1\n  node_hour: 2\n");
  ASSERT_FALSE(both);
  EXPECT_NE(both.error().message.find("gpu_hour or node_hour, not both"), std::string::npos);
  auto typo = Load("cost:\n  gpu_hours: 1\n");
  ASSERT_FALSE(typo);
  EXPECT_NE(typo.error().message.find("job.yaml:2: unknown key 'cost.gpu_hours' (did you mean 'gpu_hour'?)"),
            std::string::npos)
      << typo.error().message;
  auto range = Load("cost:\n  egress_gb: [5, 1]\n");
  ASSERT_FALSE(range);
  EXPECT_NE(range.error().message.find("low > high"), std::string::npos);
  auto negative = Load("cost:\n  budget: -1\n");
  EXPECT_FALSE(negative);
}

TEST(ConfigHooks, ArgvTimeoutsAndTemplates) {
  auto job = Load(
      "hooks:\n  on_finish: {command: [\"/bin/echo\", \"{exit_code}\", \"{report}\"], timeout: 2m}\n"
      "job:\n  labels: {model: m1, precision: bf16}\n");
  ASSERT_TRUE(job) << job.error().message;
  EXPECT_EQ(job->hooks.on_finish.command.size(), 3u);
  EXPECT_EQ(job->hooks.on_finish.timeout, std::chrono::minutes(2));
  EXPECT_EQ(job->job.labels.at("precision"), "bf16");
  auto shell = Load("hooks:\n  on_finish: {command: \"echo hi\"}\n");
  ASSERT_FALSE(shell);
  EXPECT_NE(shell.error().message.find("never a shell string"), std::string::npos);
  auto placeholder = Load("hooks:\n  on_notice: {command: [\"/bin/echo\", \"{secret}\"]}\n");
  ASSERT_FALSE(placeholder);
  EXPECT_NE(placeholder.error().message.find("placeholder {secret} is not known in hooks"), std::string::npos);
  auto missing = Load("hooks:\n  on_notice: {timeout: 5s}\n");
  ASSERT_FALSE(missing);
  EXPECT_NE(missing.error().message.find("a hook needs a command"), std::string::npos);
}

}  // namespace
}  // namespace spotvisor::config

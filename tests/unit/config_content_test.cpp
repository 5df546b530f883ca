// checkpoints.content in the job file: read, shown by --print-config, and refused beside
// validate: structure (which reads no tensor) with the file, line and key named. (Apart from
// tests/unit/checkpoint_content_test.cpp, which the TSan build links without the config.)
#include <gtest/gtest.h>

#include "spotvisor/config/loader.hpp"
#include "support/test_support.hpp"

namespace spotvisor::config {
namespace {

Result<JobConfig> LoadJob(const spotvisor::testing::TempDir& dir, const std::string& checkpoints) {
  spotvisor::testing::WriteFile(dir / "job.yaml", "job:\n  command: [\"/bin/true\"]\ncheckpoints:\n" + checkpoints);
  auto job = LoadJobFile(dir / "job.yaml");
  if (!job) return job;
  if (Status s = Finalize(*job); !s) return s.error();
  return job;
}

TEST(ConfigContent, JobFileKey) {
  spotvisor::testing::TempDir dir;
  EXPECT_EQ(LoadJob(dir, "  keep: 1\n")->checkpoints.content, ContentCheck::kOff);
  auto job = LoadJob(dir, "  content: finite\n");
  ASSERT_TRUE(job) << job.error().message;
  EXPECT_EQ(job->checkpoints.content, ContentCheck::kFinite);
  EXPECT_NE(ToYaml(*job).find("content: finite"), std::string::npos);
  auto typo = LoadJob(dir, "  content: finit\n");
  ASSERT_FALSE(typo);
  EXPECT_NE(typo.error().message.find("job.yaml:4: checkpoints.content"), std::string::npos) << typo.error().message;
  auto blind = LoadJob(dir, "  validate: structure\n  content: finite\n");
  ASSERT_FALSE(blind);
  EXPECT_NE(blind.error().message.find("checkpoints.content: finite reads every tensor"), std::string::npos)
      << blind.error().message;
}

}  // namespace
}  // namespace spotvisor::config

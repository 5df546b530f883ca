// The README's whole job files (a ```yaml block with a top-level `job:`) are what users copy:
// each must load as it stands (`spotvisor run --config F --print-config` exits 0).
#include <gtest/gtest.h>

#include <regex>

#include "support/test_support.hpp"

namespace spotvisor {
namespace {

TEST(ReadmeExamples, EveryJobFileLoads) {
  const std::string readme = testing::ReadFile(std::filesystem::path(SPOTVISOR_SOURCE_DIR) / "README.md");
  const std::regex block("```yaml\n([\\s\\S]*?)```");
  const std::regex whole_job("(^|\n)job:");
  testing::TempDir dir;
  int checked = 0;
  for (auto it = std::sregex_iterator(readme.begin(), readme.end(), block); it != std::sregex_iterator(); ++it) {
    const std::string text = (*it)[1].str();
    if (!std::regex_search(text, whole_job)) continue;
    const auto file = dir / ("readme-" + std::to_string(++checked) + ".yaml");
    testing::WriteFile(file, text);
    std::string output;
    EXPECT_EQ(testing::RunSpotvisor({"run", "--config", file.string(), "--print-config"}, &output), 0)
        << "README job file #" << checked << ":\n"
        << text << "\n"
        << output;
  }
  EXPECT_GE(checked, 2) << "the README's quick start and multi-node job files";
}

}  // namespace
}  // namespace spotvisor

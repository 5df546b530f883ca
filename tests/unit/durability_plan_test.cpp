// The planner (mirror/durability_plan.hpp) and preflight's upload line, as a table: the
// window, the save, the bytes and the rate in; the margin, the verdict and the words out.
#include "spotvisor/mirror/durability_plan.hpp"

#include <gtest/gtest.h>

#include "spotvisor/config/loader.hpp"
#include "spotvisor/preflight/checks.hpp"
#include "support/test_support.hpp"

namespace spotvisor::mirror {
namespace {

using namespace std::chrono_literals;
constexpr std::uint64_t kMiB = 1 << 20;

TEST(DurabilityPlan, MarginIsTheWindowLessSaveAndUpload) {
  struct Row {
    const char* what;
    Duration window;
    std::optional<Duration> save;
    std::uint64_t bytes;
    double rate;
    Duration margin;
  };
  const Row rows[] = {
      {"aws: 10 s save, 1 GiB at 10 MiB/s", 120s, 10s, 1024 * kMiB, 10.0 * kMiB, 120s - 10s - 102400ms},
      {"gcp: the same does not fit", 30s, 10s, 1024 * kMiB, 10.0 * kMiB, 30s - 10s - 102400ms},
      {"save not measured counts 0", 30s, std::nullopt, 100 * kMiB, 10.0 * kMiB, 20s},
      {"exactly the window fits", 30s, 10s, 200 * kMiB, 10.0 * kMiB, 0s},
  };
  for (const auto& r : rows) {
    SCOPED_TRACE(r.what);
    const auto plan = PlanDurability(r.window, r.save, r.bytes, r.rate);
    EXPECT_EQ(plan.margin, r.margin);
    EXPECT_EQ(plan.fits(), r.margin >= 0s);
  }
}

TEST(DurabilityPlan, NumbersAndAdviceNameWhatWouldMakeItFit) {
  const auto plan = PlanDurability(30s, 10s, 1024 * kMiB, 10.0 * kMiB);
  EXPECT_EQ(plan.Numbers(),
            "window_s=30.0 save_s=10.0 upload_s=102.4 margin_s=-82.4 bytes=1073741824 upload_rate=\"10 MiB/s\"");
  EXPECT_EQ(plan.Advice(),
            "needs an upload rate of 51 MiB/s (measured 10 MiB/s), or a checkpoint of at most 200.0 MiB "
            "(this one: 1.0 GiB); until then the newest durable checkpoint is the last periodic one: a shorter "
            "cadence.every keeps it recent");
  const auto hopeless = PlanDurability(30s, 45s, kMiB, 10.0 * kMiB);
  EXPECT_FALSE(hopeless.fits());
  EXPECT_EQ(hopeless.Advice().rfind("the save alone takes longer than the 30.0 s window", 0), 0u) << hopeless.Advice();
}

TEST(DurabilityPlan, LastSaveTimeIsTheNewestMeasuredCost) {
  std::vector<cadence::CheckpointRecord> records(3);
  records[0].event = "checkpoint";
  records[0].cost_ms = 4000;
  records[1].event = "interval";
  records[1].cost_ms = 99;          // not a checkpoint
  records[2].event = "checkpoint";  // the trainer's own: no cost
  EXPECT_EQ(LastSaveTime(records), Duration(4s));
  EXPECT_EQ(LastSaveTime({}), std::nullopt);
}

TEST(DurabilityPlan, UploadRateSurvivesForPreflight) {
  testing::TempDir dir;
  EXPECT_EQ(LoadUploadRate(dir / "state"), std::nullopt);
  ASSERT_TRUE(SaveUploadRate(dir / "state", 1234.5, std::chrono::system_clock::now()));
  EXPECT_EQ(LoadUploadRate(dir / "state"), 1234.5);
  testing::WriteFile(dir / "state" / "upload-rate.json", "{torn");
  EXPECT_EQ(LoadUploadRate(dir / "state"), std::nullopt);
}

TEST(PreflightUpload, FailsWhenItDoesNotFitAndSaysWhy) {
  testing::TempDir dir;
  auto job = config::DefaultConfig(dir.path());
  const preflight::SizeEstimate size{1024 * kMiB, "--checkpoint-size"};
  auto line = preflight::EvaluateUpload(10.0 * kMiB, "assumed, --assume-upload-rate", size, 10s, "gcp", job);
  EXPECT_EQ(line.status, preflight::CheckStatus::kFail) << line.text;
  EXPECT_NE(
      line.text.find("upload 10 MiB/s (assumed, --assume-upload-rate) → a 1.0 GiB checkpoint (--checkpoint-size) "
                     "is durable ≈ 112 s after a notice (save 10 s + upload 102 s); the gcp warning window is 30 s: "
                     "it does not fit by 82 s — needs an upload rate of 51 MiB/s"),
      std::string::npos)
      << line.text;
  line = preflight::EvaluateUpload(10.0 * kMiB, "assumed", size, 10s, "aws", job);
  EXPECT_EQ(line.status, preflight::CheckStatus::kWarn) << line.text;  // fits, with less than a quarter to spare
  EXPECT_NE(line.text.find("it fits with 7.6 s to spare"), std::string::npos) << line.text;
  line = preflight::EvaluateUpload(100.0 * kMiB, "assumed", size, 10s, "aws", job);
  EXPECT_EQ(line.status, preflight::CheckStatus::kOk) << line.text;
  line = preflight::EvaluateUpload(std::nullopt, "", size, 10s, "aws", job);
  EXPECT_EQ(line.status, preflight::CheckStatus::kWarn) << line.text;
  EXPECT_NE(line.text.find("pass --assume-upload-rate"), std::string::npos) << line.text;
}

}  // namespace
}  // namespace spotvisor::mirror

// The preflight rules with injected numbers: free space against (keep + 1) checkpoints, a
// slow disk against the provider's warning window, the line format.
#include <gtest/gtest.h>

#include "spotvisor/cadence/checkpoint_journal.hpp"
#include "spotvisor/preemption/warning_window.hpp"
#include "spotvisor/preflight/checks.hpp"
#include "spotvisor/preflight/preflight.hpp"
#include "support/test_support.hpp"

namespace spotvisor::preflight {
namespace {

using namespace std::chrono_literals;
constexpr std::uint64_t kGiB = 1ull << 30;

TEST(PreflightDisk, NeedsKeepPlusOneCheckpoints) {
  const SizeEstimate size{12 * kGiB, "the last checkpoint"};
  auto ok = EvaluateDiskSpace("/ckpt", 100 * kGiB, 3, size);
  EXPECT_EQ(ok.status, CheckStatus::kOk) << ok.text;
  EXPECT_NE(ok.text.find("need 48.0 GiB = 4 × 12.0 GiB (the last checkpoint)"), std::string::npos) << ok.text;
  auto tight = EvaluateDiskSpace("/ckpt", 40 * kGiB, 3, size);
  EXPECT_EQ(tight.status, CheckStatus::kFail) << tight.text;
  EXPECT_NE(FormatLine(tight).find("FAIL  disk"), std::string::npos) << FormatLine(tight);
  EXPECT_EQ(EvaluateDiskSpace("/ckpt", 100 * kGiB, 0, size).status, CheckStatus::kWarn);
  EXPECT_EQ(EvaluateDiskSpace("/ckpt", 100 * kGiB, 3, std::nullopt).status, CheckStatus::kWarn);
}

// The size to plan for: the flag, else the last checkpoint the journal measured, else
// the newest one on disk.
TEST(PreflightSize, FlagThenTheLastMeasuredCheckpoint) {
  testing::TempDir dir;
  config::JobConfig job;
  job.telemetry.state_dir = dir / "state";
  EXPECT_FALSE(EstimateCheckpointSize(job, std::nullopt));
  EXPECT_EQ(EstimateCheckpointSize(job, 5 * kGiB)->bytes, 5 * kGiB);
  for (const std::uint64_t size : {3 * kGiB, 7 * kGiB}) {
    cadence::CheckpointRecord r;
    r.event = "checkpoint";
    r.size_bytes = size;
    ASSERT_TRUE(cadence::AppendCheckpointRecord(job.telemetry.state_dir, r).ok());
  }
  const auto last = EstimateCheckpointSize(job, std::nullopt);
  ASSERT_TRUE(last);
  EXPECT_EQ(last->bytes, 7 * kGiB);
  EXPECT_EQ(last->source, "the last checkpoint");
}

TEST(PreflightWrite, ASlowDiskDoesNotFitTheAwsWindow) {
  config::JobConfig job;  // grace 90 s, safety margin 5 s
  const SizeEstimate size{12 * kGiB, "--checkpoint-size"};
  auto fast = EvaluateWriteSpeed(850.0 * (1 << 20), size, "aws", job, "measured");
  EXPECT_EQ(fast.status, CheckStatus::kOk) << fast.text;
  EXPECT_NE(fast.text.find("write 850 MiB/s"), std::string::npos) << fast.text;
  EXPECT_NE(fast.text.find("takes ≈ 14 s here; the aws warning window is 120 s"), std::string::npos) << fast.text;
  auto slow = EvaluateWriteSpeed(50.0 * (1 << 20), size, "aws", job, "assumed");
  EXPECT_EQ(slow.status, CheckStatus::kFail) << slow.text;  // ≈ 246 s > min(115 s, 90 s)
  EXPECT_NE(slow.text.find("does not fit"), std::string::npos) << slow.text;
  auto marginal = EvaluateWriteSpeed(200.0 * (1 << 20), size, "aws", job, "measured");
  EXPECT_EQ(marginal.status, CheckStatus::kWarn) << marginal.text;  // ≈ 61 s of 90 s
  // GCP gives 30 s: the same fast disk no longer fits a much bigger checkpoint.
  EXPECT_EQ(EvaluateWriteSpeed(850.0 * (1 << 20), SizeEstimate{40 * kGiB, "x"}, "gcp", job, "m").status,
            CheckStatus::kFail);
  EXPECT_EQ(EvaluateWriteSpeed(1e9, std::nullopt, "aws", job, "m").status, CheckStatus::kWarn);
}

TEST(PreflightWrite, WindowsPerProvider) {
  config::ProviderSection p;
  EXPECT_EQ(preemption::WarningWindow("aws", p), 120s);
  EXPECT_EQ(preemption::WarningWindow("gcp", p), 30s);
  EXPECT_EQ(preemption::WarningWindow("azure", p), 30s);
  EXPECT_EQ(preemption::WarningWindow("alibaba", p), 300s);
  EXPECT_EQ(preemption::WarningWindow("none", p), p.default_window);
}

TEST(PreflightFormat, Rates) {
  EXPECT_EQ(FormatRate(850.0 * (1 << 20)), "850 MiB/s");
  EXPECT_EQ(FormatRate(1.25 * (1 << 30)), "1.2 GiB/s");
  EXPECT_EQ(FormatRate(100), "100 B/s");
}

}  // namespace
}  // namespace spotvisor::preflight

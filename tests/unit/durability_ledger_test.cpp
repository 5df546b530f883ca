// durability.json (mirror/durability_ledger.hpp): each change rewrites it, it reads back
// after a restart, a torn file reads as nothing known, and it keeps the newest steps only.
#include "spotvisor/mirror/durability_ledger.hpp"

#include <gtest/gtest.h>

#include "support/test_support.hpp"

namespace spotvisor::mirror {
namespace {

TEST(DurabilityLedger, EveryChangeSurvivesARestart) {
  testing::TempDir dir;
  {
    DurabilityLedger ledger(dir / "state");
    ledger.Set("ckpt_step10", {10, Durability::kUploading, 4096, 1000, std::nullopt, ""});
    ledger.Set("ckpt_step10", {10, Durability::kDurable, 4096, 1000, 3500, ""});
    ledger.Set("ckpt_step20", {20, Durability::kFailed, 8192, 4000, std::nullopt, "rclone copyto failed: exit code 1"});
  }
  const auto read = DurabilityLedger::Read(dir / "state");
  ASSERT_EQ(read.size(), 2u);
  EXPECT_EQ(read.at("ckpt_step10").state, Durability::kDurable);
  EXPECT_EQ(read.at("ckpt_step10").durable_ms, 3500);
  EXPECT_EQ(read.at("ckpt_step20").state, Durability::kFailed);
  EXPECT_EQ(read.at("ckpt_step20").detail, "rclone copyto failed: exit code 1");
  DurabilityLedger again(dir / "state");  // a restarted spotvisor adds to what was there
  again.Set("ckpt_step30", {30, Durability::kSuperseded, 1, 5000, std::nullopt, "gave way"});
  EXPECT_EQ(DurabilityLedger::Read(dir / "state").size(), 3u);
}

TEST(DurabilityLedger, ATornFileIsNothingKnownAndTheNewestStepsAreKept) {
  testing::TempDir dir;
  testing::WriteFile(dir / "durability.json", "{\"checkpoints\": {\"a\": {\"step\"");
  EXPECT_TRUE(DurabilityLedger::Read(dir.path()).empty());
  DurabilityLedger ledger(dir.path());
  for (std::uint64_t step = 1; step <= kMaxDurabilityRecords + 10; ++step)
    ledger.Set("ckpt_step" + std::to_string(step), {step, Durability::kDurable, 1, 0, 0, ""});
  const auto read = DurabilityLedger::Read(dir.path());
  EXPECT_EQ(read.size(), kMaxDurabilityRecords);
  EXPECT_EQ(read.count("ckpt_step10"), 0u);
  EXPECT_EQ(read.count("ckpt_step" + std::to_string(kMaxDurabilityRecords + 10)), 1u);
}

}  // namespace
}  // namespace spotvisor::mirror

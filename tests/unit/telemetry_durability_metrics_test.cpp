// The durability metrics (run_metrics.cpp): without a mirror every family is there with
// its "unknown" value; with one, the newest checkpoint on the mirror and its age, the
// bytes still only local, and the planner's verdict and margin.
#include <gtest/gtest.h>

#include "spotvisor/telemetry/run_metrics.hpp"

namespace spotvisor::telemetry {
namespace {

using namespace std::chrono_literals;

TEST(DurabilityMetrics, UnknownWithoutAMirrorThenWhatTheMirrorHolds) {
  RunLedger ledger;
  RunSummary summary;
  LiveView v;
  v.ledger = &ledger;
  v.summary = &summary;
  v.now_ms = 100000;
  std::string text = RenderRunMetrics(v);
  for (const char* line : {"\nspotvisor_durable_newest_step -1\n", "\nspotvisor_durable_newest_age_seconds -1\n",
                           "\nspotvisor_durable_pending_bytes 0\n", "\nspotvisor_durability_fits -1\n",
                           "\nspotvisor_durability_margin_seconds 0\n"}) {
    EXPECT_NE(text.find(line), std::string::npos) << line << text;
  }
  v.mirrored = true;
  v.newest_durable = std::pair<std::uint64_t, std::int64_t>{40, 70000};
  v.bytes_not_durable = 4096;
  v.durability = mirror::PlanDurability(30s, 10s, 300ull << 20, 10.0 * (1 << 20));  // 30 s upload: 10 s short
  text = RenderRunMetrics(v);
  for (const char* line : {"\nspotvisor_durable_newest_step 40\n", "\nspotvisor_durable_newest_age_seconds 30\n",
                           "\nspotvisor_durable_pending_bytes 4096\n", "\nspotvisor_durability_fits 0\n",
                           "\nspotvisor_durability_margin_seconds -10\n"}) {
    EXPECT_NE(text.find(line), std::string::npos) << line << text;
  }
}

}  // namespace
}  // namespace spotvisor::telemetry

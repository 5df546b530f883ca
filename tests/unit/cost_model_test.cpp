// The cost model: billed time x prices, unknowns listed and never zero, ranges summed,
// cost per 1000 steps, the budget's "upper end counts".
#include "spotvisor/cost/cost_model.hpp"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

namespace spotvisor::cost {
namespace {

config::CostValue V(double v) { return {true, v, v}; }
config::CostValue R(double lo, double hi) { return {true, lo, hi}; }

config::CostSection Priced() {
  config::CostSection c;
  c.configured = true;
  c.gpu_hour = V(2.0);
  c.gpus = 4;
  c.disk_gb = V(730);
  c.disk_gb_month = V(0.1);  // 730 GB x 0.1 / 730 h = 0.1 per hour
  c.snapshot_gb = V(0);
  c.snapshot_gb_month = V(0.05);
  c.egress_gb = R(0, 10);
  c.egress_per_gb = V(0.5);
  c.public_ip_hour = V(0.01);
  c.support_month = V(0);
  return c;
}

TEST(CostModel, KnownComponentsAddUpAndRangesMakeARange) {
  const auto e = EstimateCost(Priced(), Usage{10.0, 20.0});
  EXPECT_TRUE(e.unknown.empty());
  // compute 4 x 2.0 x 10 = 80; disk 0.1/h x 20 = 2; egress 0..5; ip 0.1
  EXPECT_DOUBLE_EQ(e.low, 80 + 2 + 0 + 0.1);
  EXPECT_DOUBLE_EQ(e.high, 80 + 2 + 5 + 0.1);
  EXPECT_FALSE(e.exact());
}

TEST(CostModel, AnUnpricedComponentIsUnknownNeverZero) {
  auto c = Priced();
  c.support_month = {};
  c.unknown = {"snapshots-of-old-runs"};
  const auto e = EstimateCost(c, Usage{1.0, 1.0});
  EXPECT_EQ(e.unknown, (std::vector<std::string>{"support", "snapshots-of-old-runs"}));
  EXPECT_NE(FormatTotal(e).find("+ unknown (support, snapshots-of-old-runs)"), std::string::npos) << FormatTotal(e);
  const auto j = EstimateToJson(e);
  for (const auto& comp : j["components"]) {
    if (comp["name"] == "support") {
      EXPECT_TRUE(comp["low"].is_null());
    }
  }
}

TEST(CostModel, DefaultsAreUnknownAndNoSectionMeansNotConfigured) {
  config::CostSection c;
  EXPECT_FALSE(EstimateCost(c, Usage{1, 1}).configured);
  EXPECT_EQ(FormatTotal(EstimateCost(c, Usage{1, 1})), "unknown (no cost section configured)");
  c.configured = true;
  const auto e = EstimateCost(c, Usage{1, 1});
  EXPECT_EQ(e.unknown.size(), 6u);  // compute, disk, snapshots, egress, public_ip, support
  EXPECT_EQ(e.high, 0);             // what the known components add up to: nothing
  EXPECT_FALSE(e.Upper());          // the upper bound is unknown, not 0 (issue 12.4)
  EXPECT_TRUE(EstimateToJson(e)["total_high"].is_null());
  EXPECT_FALSE(EstimateCost(config::CostSection{}, Usage{1, 1}).Upper());  // no cost section
}

TEST(CostModel, NodeHourAndBillingMinimum) {
  config::CostSection c;
  c.configured = true;
  c.node_hour = V(3.6);
  EXPECT_DOUBLE_EQ(BilledHours({10, 30}, std::chrono::seconds(60)), 120.0 / 3600);
  const auto e = EstimateCost(c, Usage{0.5, 0.5});
  EXPECT_DOUBLE_EQ(e.components.front().low, 1.8);
  EXPECT_EQ(e.components.front().name, "compute");
}

TEST(CostModel, PerThousandStepsUsesBothEnds) {
  const auto e = EstimateCost(Priced(), Usage{10.0, 20.0});
  const auto p = PerThousand(e, 2000);
  ASSERT_TRUE(p);
  EXPECT_DOUBLE_EQ(p->first, e.low / 2);
  EXPECT_DOUBLE_EQ(p->second, e.high / 2);
  EXPECT_FALSE(PerThousand(e, 0));
}

TEST(CostModel, SectionRoundTripsThroughJson) {
  auto c = Priced();
  c.other_hour["vm"] = R(0.1, 0.2);
  c.budget = 12.5;
  auto back = CostSectionFromJson(CostSectionToJson(c));
  ASSERT_TRUE(back);
  EXPECT_EQ(CostSectionToJson(*back), CostSectionToJson(c));
}

}  // namespace
}  // namespace spotvisor::cost

// The cadence formulas against the published examples (REFERENCE.md, from Daly 2006) and
// the policy's C/M bookkeeping: median cost, M updated by interruptions, clamping.
#include "spotvisor/cadence/cadence_policy.hpp"

#include <gtest/gtest.h>

#include "spotvisor/cadence/daly.hpp"

namespace spotvisor::cadence {
namespace {

using namespace std::chrono_literals;

TEST(Daly, PublishedExamples) {
  // C = 30 s, M = 3 h: T ≈ 13 min, waste ≈ 7.5 %.
  EXPECT_NEAR(DalyInterval(Seconds(30), Seconds(3 * 3600)).count(), 785.1, 0.5);
  EXPECT_NEAR(DalyInterval(Seconds(30), Seconds(3 * 3600)).count() / 60, 13.0, 0.2);
  EXPECT_NEAR(WasteAtOptimum(Seconds(30), Seconds(3 * 3600)), 0.0745, 0.001);
  // C = 60 s, M = 1 h: T ≈ 10 min, waste ≈ 18 %.
  EXPECT_NEAR(DalyInterval(Seconds(60), Seconds(3600)).count(), 617.9, 0.5);
  EXPECT_NEAR(WasteAtOptimum(Seconds(60), Seconds(3600)), 0.1826, 0.001);
}

TEST(Daly, YoungIsTheFirstOrderTerm) {
  EXPECT_NEAR(YoungInterval(Seconds(30), Seconds(10800)).count(), 804.98, 0.01);
  // Daly = Young·(1 + small terms) − C: a little below Young for small C/M.
  EXPECT_LT(DalyInterval(Seconds(30), Seconds(10800)), YoungInterval(Seconds(30), Seconds(10800)));
}

TEST(Daly, CostAtLeastTwiceMtbiGivesM) {
  EXPECT_DOUBLE_EQ(DalyInterval(Seconds(200), Seconds(100)).count(), 100.0);
  EXPECT_DOUBLE_EQ(DalyInterval(Seconds(200), Seconds(99)).count(), 99.0);
  EXPECT_DOUBLE_EQ(WasteAtOptimum(Seconds(1000), Seconds(1)), 1.0);
}

config::CadenceSection Adaptive(Duration min, Duration max) {
  config::CadenceSection c;
  c.mode = config::CadenceMode::kAdaptive;
  c.min = min;
  c.max = max;
  return c;
}

TEST(CadencePolicy, FixedIsEvery) {
  config::CadenceSection c;
  c.mode = config::CadenceMode::kFixed;
  c.every = 10min;
  CadencePolicy p(c, 3h);
  p.ObserveCost(30s);
  EXPECT_EQ(p.Interval(), 10min);
}

TEST(CadencePolicy, AdaptiveStartsAtMinThenFollowsDaly) {
  CadencePolicy p(Adaptive(2min, 2h), 3h);
  EXPECT_FALSE(p.Cost());
  EXPECT_EQ(p.Interval(), 2min);  // nothing measured yet: soon, so there is something to measure
  p.ObserveCost(30s);
  EXPECT_NEAR(std::chrono::duration<double>(p.Interval()).count(), 785.1, 0.5);
  EXPECT_EQ(p.Describe(), "C=30s M=3h interval=13m5s");
}

// Issue 36: where save + upload does not fit the warning window, the upload counts in C
// (C = 30 s + 30 s = 60 s, M = 3 h: Daly's interval for 60 s), and no longer once it fits.
// A new verdict, or an upload time that moved by more than a quarter, is a change; a small
// wobble is not (no new interval for each upload).
TEST(CadencePolicy, TheUploadCountsInCWhileItDoesNotFitTheWindow) {
  CadencePolicy p(Adaptive(2min, 2h), 3h);
  p.ObserveCost(30s);
  const auto save_only = p.Interval();
  EXPECT_FALSE(p.ObserveUpload(std::nullopt)) << "it fits, as assumed";
  EXPECT_TRUE(p.ObserveUpload(30s));
  EXPECT_EQ(p.DurableCost(), 60s);
  EXPECT_EQ(p.Cost(), 30s) << "the save's cost itself is unchanged";
  EXPECT_NEAR(std::chrono::duration<double>(p.Interval()).count(), DalyInterval(Seconds(60), Seconds(3 * 3600)).count(),
              0.5);
  EXPECT_GT(p.Interval(), save_only);
  EXPECT_EQ(p.Describe(), "C=30s+upload 30s M=3h interval=" +
                              FormatDuration(std::chrono::round<std::chrono::seconds>(Duration(p.Interval()))));
  EXPECT_FALSE(p.ObserveUpload(35s)) << "within a quarter: no change";
  EXPECT_EQ(p.upload_counted(), 30s);
  EXPECT_TRUE(p.ObserveUpload(45s));
  EXPECT_EQ(p.DurableCost(), 75s);
  EXPECT_TRUE(p.ObserveUpload(std::nullopt)) << "it fits again";
  EXPECT_EQ(p.Interval(), save_only);
  EXPECT_NEAR(*p.ExpectedWastePercent(), 100 * WasteAtOptimum(Seconds(30), Seconds(3 * 3600)), 1e-9);
}

TEST(CadencePolicy, CostIsTheMedianOfTheRecentOnes) {
  CadencePolicy p(Adaptive(1s, 10h), 3h);
  for (auto c : {10s, 50s, 30s, 1000s, 20s}) p.ObserveCost(c);
  EXPECT_EQ(*p.Cost(), 30s);  // one outlier does not move it
  p.ObserveCost(40s);         // window of 5: 10s drops out
  EXPECT_EQ(*p.Cost(), 40s);
  EXPECT_EQ(p.total_cost(), 1150s);
}

TEST(CadencePolicy, InterruptionsShortenM) {
  CadencePolicy p(Adaptive(1s, 10h), 3h);
  EXPECT_EQ(p.Mtbi(), 3h);
  p.ObserveRun(1h, /*interrupted=*/true);
  EXPECT_EQ(p.Mtbi(), 2h);  // (3h + 1h) / (1 + 1)
  p.ObserveRun(2h, /*interrupted=*/false);
  EXPECT_EQ(p.Mtbi(), 3h);  // (3h + 3h) / 2: quiet time lengthens it again
  p.ObserveCost(60s);
  const auto before = p.Interval();
  p.ObserveRun(10min, true);
  p.ObserveRun(10min, true);
  EXPECT_LT(p.Interval(), before);
}

TEST(CadencePolicy, ClampedToBounds) {
  CadencePolicy low(Adaptive(20min, 1h), 3h);
  low.ObserveCost(1s);  // Daly ≈ 2.4 min
  EXPECT_EQ(low.Interval(), 20min);
  CadencePolicy high(Adaptive(1min, 5min), 100h);
  high.ObserveCost(10min);
  EXPECT_EQ(high.Interval(), 5min);
}

TEST(CadencePolicy, OverheadAndExpectedWaste) {
  CadencePolicy p(Adaptive(1s, 10h), 1h);
  EXPECT_FALSE(p.ExpectedWastePercent());
  p.ObserveCost(60s);
  p.ObserveCost(60s);
  EXPECT_DOUBLE_EQ(p.OverheadPercent(1h), 100.0 * 120 / 3600);
  EXPECT_DOUBLE_EQ(p.OverheadPercent(0s), 0.0);
  EXPECT_NEAR(*p.ExpectedWastePercent(), 18.26, 0.01);
}

TEST(CadencePolicy, PriorPerProvider) {
  config::CadenceSection c;
  c.mtbi_prior = 3h;
  c.mtbi_priors["aws"] = 6h;
  EXPECT_EQ(MtbiPriorFor(c, "aws"), 6h);
  EXPECT_EQ(MtbiPriorFor(c, "gcp"), 3h);
}

}  // namespace
}  // namespace spotvisor::cadence

// The budget decision: warn once past warn_fraction, stop when the estimate's upper end
// reaches the budget, never without a budget; what it says names the estimate and budget.
#include <gtest/gtest.h>

#include "spotvisor/supervisor/budget.hpp"

namespace spotvisor::supervisor {
namespace {

config::CostSection Cost(double budget, double warn_fraction = 0.8) {
  config::CostSection c;
  c.configured = true;
  c.currency = "EUR";
  c.budget = budget;
  c.warn_fraction = warn_fraction;
  return c;
}

cost::Estimate Spent(double low, double high) {
  cost::Estimate e;
  e.configured = true;
  e.currency = "EUR";
  e.low = low;
  e.high = high;
  return e;
}

TEST(Budget, BelowTheWarnFractionNothingHappens) {
  const auto d = DecideBudget(Spent(7, 7.99), Cost(10), false);
  EXPECT_FALSE(d.warn);
  EXPECT_FALSE(d.stop);
}

TEST(Budget, TheWarnFractionWarnsOnce) {
  const auto first = DecideBudget(Spent(8, 8), Cost(10), false);
  EXPECT_TRUE(first.warn);
  EXPECT_FALSE(first.stop);
  EXPECT_EQ(first.estimate, "8.00 EUR");
  EXPECT_EQ(first.budget, "10.00");
  EXPECT_FALSE(DecideBudget(Spent(9, 9), Cost(10), /*warned_before=*/true).warn);
}

TEST(Budget, TheUpperEndReachingTheBudgetStopsAndSaysWhy) {
  const auto d = DecideBudget(Spent(9, 10), Cost(10), true);
  EXPECT_TRUE(d.stop);
  EXPECT_FALSE(d.warn);
  EXPECT_EQ(d.stop_detail, "cost budget exhausted: estimate 9.00-10.00 EUR reached cost.budget 10.00 EUR");
}

TEST(Budget, AJumpPastBothWarnsAndStopsAtOnce) {
  const auto d = DecideBudget(Spent(12, 12), Cost(10), false);
  EXPECT_TRUE(d.warn);
  EXPECT_TRUE(d.stop);
}

TEST(Budget, NoBudgetOrNoCostSectionNeverDecides) {
  EXPECT_FALSE(DecideBudget(Spent(1e9, 1e9), Cost(0), false).stop);
  auto unconfigured = Cost(10);
  unconfigured.configured = false;
  const auto d = DecideBudget(Spent(1e9, 1e9), unconfigured, false);
  EXPECT_FALSE(d.warn);
  EXPECT_FALSE(d.stop);
}

TEST(Budget, UnknownComponentsAreNamedButNotCounted) {
  auto e = Spent(5, 5);
  e.unknown = {"egress"};
  const auto d = DecideBudget(e, Cost(10), false);
  EXPECT_FALSE(d.warn);
  EXPECT_EQ(d.estimate, "5.00 EUR + unknown (egress)");
}

}  // namespace
}  // namespace spotvisor::supervisor

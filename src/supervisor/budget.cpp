// Budget decisions; see budget.hpp. Compares the estimate's upper end (the sum of the
// priced components' high ends) with the budget; unknown components are not counted.
#include "spotvisor/supervisor/budget.hpp"

namespace spotvisor::supervisor {

BudgetDecision DecideBudget(const cost::Estimate& estimate, const config::CostSection& cost, bool warned_before) {
  BudgetDecision d;
  if (!cost.configured || cost.budget <= 0) return d;
  d.estimate = cost::FormatTotal(estimate);
  d.budget = cost::FormatMoney(cost.budget);
  d.warn = !warned_before && estimate.high >= cost.budget * cost.warn_fraction;
  d.stop = estimate.high >= cost.budget;
  if (d.stop) {
    d.stop_detail =
        "cost budget exhausted: estimate " + d.estimate + " reached cost.budget " + d.budget + " " + cost.currency;
  }
  return d;
}

}  // namespace spotvisor::supervisor

// The cost budget as policy (cost.budget, cost.warn_fraction): given the run's estimate so
// far, is it time to warn, or to checkpoint and stop (exit 3), and what to say. Pure; the
// telemetry observer computes the estimate on its timer, calls this and acts on the answer.
#pragma once

#include <string>

#include "spotvisor/config/job_config.hpp"
#include "spotvisor/cost/cost_model.hpp"

namespace spotvisor::supervisor {

struct BudgetDecision {
  bool warn = false;        // the upper end reached warn_fraction of the budget, not said before
  bool stop = false;        // the upper end reached the budget: checkpoint and stop
  std::string estimate;     // the estimate as a person reads it ("12.34 USD" or a range)
  std::string budget;       // cost.budget as money
  std::string stop_detail;  // why the run stops: its exit message
};

// `warned_before`: a warning was already given for this job (run.json remembers it). With no
// budget (0) or no cost section nothing is ever decided.
BudgetDecision DecideBudget(const cost::Estimate& estimate, const config::CostSection& cost, bool warned_before);

}  // namespace spotvisor::supervisor

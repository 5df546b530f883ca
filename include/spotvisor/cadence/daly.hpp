// The checkpoint-interval formulas of REFERENCE.md: Young's first-order optimum and
// Daly's higher-order one, from the blocking checkpoint cost C and the mean time between
// interruptions M, plus the expected waste at the optimum. Pure functions, any thread.
#pragma once

#include <chrono>

namespace spotvisor::cadence {

using Seconds = std::chrono::duration<double>;

// Young: T = sqrt(2·C·M). C and M must be > 0.
Seconds YoungInterval(Seconds cost, Seconds mtbi);

// Daly: T = sqrt(2CM)·[1 + (1/3)·sqrt(C/2M) + (1/9)·(C/2M)] − C for C < 2M, else T = M.
Seconds DalyInterval(Seconds cost, Seconds mtbi);

// Fraction of time lost to checkpoints and rework at the optimum ≈ sqrt(2C/M), capped at 1.
double WasteAtOptimum(Seconds cost, Seconds mtbi);

}  // namespace spotvisor::cadence

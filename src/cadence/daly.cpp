// Young/Daly checkpoint intervals; see daly.hpp. The formulas are written as in Daly's
// 2006 paper ("A higher order estimate of the optimum checkpoint interval for restart
// dumps") so that a reader can check them against it term by term.
#include "spotvisor/cadence/daly.hpp"

#include <algorithm>
#include <cmath>

namespace spotvisor::cadence {

Seconds YoungInterval(Seconds cost, Seconds mtbi) { return Seconds(std::sqrt(2.0 * cost.count() * mtbi.count())); }

Seconds DalyInterval(Seconds cost, Seconds mtbi) {
  const double c = cost.count();
  const double m = mtbi.count();
  if (c >= 2.0 * m) return mtbi;
  const double ratio = c / (2.0 * m);
  return Seconds(std::sqrt(2.0 * c * m) * (1.0 + std::sqrt(ratio) / 3.0 + ratio / 9.0) - c);
}

double WasteAtOptimum(Seconds cost, Seconds mtbi) {
  if (mtbi.count() <= 0) return 1.0;
  return std::min(1.0, std::sqrt(2.0 * cost.count() / mtbi.count()));
}

}  // namespace spotvisor::cadence

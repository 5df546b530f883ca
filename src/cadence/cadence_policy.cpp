// The cadence policy; see cadence_policy.hpp. Durations are whole milliseconds; the
// formulas run in double seconds.
#include "spotvisor/cadence/cadence_policy.hpp"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <vector>

#include "spotvisor/cadence/daly.hpp"

namespace spotvisor::cadence {
namespace {

Duration ToDuration(Seconds s) {
  return std::chrono::duration_cast<Duration>(
      std::chrono::duration<double, std::milli>(std::llround(s.count() * 1000.0)));
}

}  // namespace

CadencePolicy::CadencePolicy(const config::CadenceSection& cadence, Duration mtbi_prior)
    : cadence_(cadence), prior_(std::max(mtbi_prior, Duration(1))) {}

void CadencePolicy::ObserveCost(Duration cost) {
  cost = std::max(cost, Duration(0));
  costs_.push_back(cost);
  if (costs_.size() > kCostWindow) costs_.pop_front();
  total_cost_ += cost;
}

void CadencePolicy::ObserveRun(Duration length, bool interrupted) {
  observed_ += std::max(length, Duration(0));
  if (interrupted) ++interruptions_;
}

bool CadencePolicy::ObserveUpload(std::optional<Duration> upload) {
  if (upload.has_value() == upload_.has_value() &&
      (!upload || std::abs((*upload - *upload_).count()) * 4 <= upload_->count()))
    return false;
  upload_ = upload;
  return true;
}

std::optional<Duration> CadencePolicy::DurableCost() const {
  const auto cost = Cost();
  if (!cost) return std::nullopt;
  return *cost + upload_.value_or(Duration::zero());
}

std::optional<Duration> CadencePolicy::Cost() const {
  if (costs_.empty()) return std::nullopt;
  std::vector<Duration> sorted(costs_.begin(), costs_.end());
  std::sort(sorted.begin(), sorted.end());
  const std::size_t n = sorted.size();
  return n % 2 == 1 ? sorted[n / 2] : (sorted[n / 2 - 1] + sorted[n / 2]) / 2;
}

Duration CadencePolicy::Mtbi() const { return (prior_ + observed_) / (1 + interruptions_); }

Duration CadencePolicy::Interval() const {
  if (cadence_.mode == config::CadenceMode::kFixed) return cadence_.every;
  const auto cost = DurableCost();
  if (!cost) return cadence_.min;
  // A measured cost of 0 (a checkpoint faster than the clock) still costs something.
  const Seconds c = std::max<Seconds>(Seconds(*cost), Seconds(0.001));
  const Duration daly = ToDuration(DalyInterval(c, Seconds(Mtbi())));
  return std::clamp(daly, cadence_.min, std::max(cadence_.min, cadence_.max));
}

double CadencePolicy::OverheadPercent(Duration elapsed) const {
  if (elapsed.count() <= 0) return 0.0;
  return 100.0 * static_cast<double>(total_cost_.count()) / static_cast<double>(elapsed.count());
}

std::optional<double> CadencePolicy::ExpectedWastePercent() const {
  const auto cost = DurableCost();
  if (!cost) return std::nullopt;
  return 100.0 * WasteAtOptimum(Seconds(*cost), Seconds(Mtbi()));
}

std::string CadencePolicy::Describe() const {
  // Whole seconds once a value is a minute or more: "13m5s", not "13m5s123ms".
  const auto pretty = [](Duration d) {
    return FormatDuration(d >= std::chrono::minutes(1) ? Duration(std::chrono::round<std::chrono::seconds>(d)) : d);
  };
  const auto cost = Cost();
  return "C=" + (cost ? pretty(*cost) : std::string("unmeasured")) +
         (upload_ ? "+upload " + pretty(*upload_) : std::string()) + " M=" + pretty(Mtbi()) +
         " interval=" + pretty(Interval());
}

Duration MtbiPriorFor(const config::CadenceSection& cadence, const std::string& provider) {
  const auto it = cadence.mtbi_priors.find(provider);
  return it != cadence.mtbi_priors.end() ? it->second : cadence.mtbi_prior;
}

}  // namespace spotvisor::cadence

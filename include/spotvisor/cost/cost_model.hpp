// The honest cost estimate of a run: billed machine time times the configured prices,
// plus disks, snapshots, egress, public IP, support and other items. A component nobody
// priced stays unknown and is listed; ranges add up to a range. Pure functions, any thread.
#pragma once

#include <nlohmann/json_fwd.hpp>
#include <optional>
#include <string>
#include <vector>

#include "spotvisor/config/job_config.hpp"
#include "spotvisor/util/result.hpp"

namespace spotvisor::cost {

inline constexpr double kHoursPerMonth = 730.0;  // the providers' convention for monthly prices

// How long the run held billable resources.
struct Usage {
  double billed_hours = 0;    // machine sessions (billing minimum applied): compute, IP, per-hour items
  double calendar_hours = 0;  // first start to last stop: disks, snapshots, support
};

struct Component {
  std::string name;      // "compute", "disk", "egress", ... or a user's name
  bool known = false;    // false: unknown, never counted as zero
  bool bounded = false;  // true when known; an unknown has no upper bound
  double low = 0;
  double high = 0;
  std::string basis;  // how it was computed, for people ("8 GPU x 2.5 h x 0.90/GPU-h")
};

struct Estimate {
  bool configured = false;  // a cost section was given
  std::string currency = "USD";
  std::vector<Component> components;  // every configured or expected component
  double low = 0;                     // sum of the known components' low ends
  double high = 0;                    // sum of the known components' high ends (not an upper bound: see Upper)
  std::vector<std::string> unknown;   // names of the components with no number
  bool exact() const { return unknown.empty() && low == high; }
  // The upper bound of the whole cost: unknown (nullopt) while any component is unknown or
  // no cost section was given. Never 0 for "we do not know".
  std::optional<double> Upper() const {
    return configured && unknown.empty() ? std::optional<double>(high) : std::nullopt;
  }
};

// Billed hours of machine sessions lasting `session_seconds`, each at least `minimum`.
double BilledHours(const std::vector<double>& session_seconds, Duration minimum);

Estimate EstimateCost(const config::CostSection& cost, const Usage& usage);

// [low, high] per 1000 units of work; nullopt when no work was measured.
std::optional<std::pair<double, double>> PerThousand(const Estimate& estimate, double units);

// "12.34", "12.34-15.00", "12.34-15.00 + unknown (egress, support)", for people.
std::string FormatTotal(const Estimate& estimate);
std::string FormatMoney(double amount);

// The cost section as JSON (kept in the state dir so that `spotvisor report` needs no job
// file) and back. FromJson errors name the field.
nlohmann::json CostSectionToJson(const config::CostSection& cost);
Result<config::CostSection> CostSectionFromJson(const nlohmann::json& j);
nlohmann::json EstimateToJson(const Estimate& estimate);

}  // namespace spotvisor::cost

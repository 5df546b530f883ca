// The cost estimate: interval arithmetic over non-negative prices and quantities, where
// "unknown" absorbs (unknown x anything = unknown). See cost_model.hpp.
#include "spotvisor/cost/cost_model.hpp"

#include <algorithm>
#include <cstdio>
#include <nlohmann/json.hpp>

namespace spotvisor::cost {
namespace {

using config::CostValue;
using nlohmann::json;

CostValue Exact(double v) { return CostValue{true, v, v}; }

CostValue Times(const CostValue& a, const CostValue& b) {
  if (!a.known || !b.known) return CostValue{};
  return CostValue{true, a.low * b.low, a.high * b.high};  // both non-negative
}

std::string Spell(const CostValue& v) {
  if (!v.known) return "unknown";
  if (v.low == v.high) return FormatMoney(v.low);
  return FormatMoney(v.low) + "-" + FormatMoney(v.high);
}

std::string Hours(double h) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.4g h", h);
  return buf;
}

Component Make(std::string name, const CostValue& v, std::string basis) {
  Component c;
  c.name = std::move(name);
  c.known = v.known;
  c.bounded = v.known;
  c.low = v.low;
  c.high = v.high;
  c.basis = std::move(basis);
  return c;
}

json ValueToJson(const CostValue& v) {
  if (!v.known) return "unknown";
  if (v.low == v.high) return v.low;
  return json::array({v.low, v.high});
}

CostValue ValueFromJson(const json& j) {
  if (j.is_number()) return Exact(j.get<double>());
  if (j.is_array() && j.size() == 2) return CostValue{true, j[0].get<double>(), j[1].get<double>()};
  return CostValue{};
}

}  // namespace

std::string FormatMoney(double amount) {
  char buf[64];
  std::snprintf(buf, sizeof buf, amount != 0 && amount < 0.01 ? "%.4f" : "%.2f", amount);
  return buf;
}

double BilledHours(const std::vector<double>& session_seconds, Duration minimum) {
  const double min_s = std::chrono::duration<double>(minimum).count();
  double total = 0;
  for (double s : session_seconds) total += std::max(s, min_s);
  return total / 3600.0;
}

Estimate EstimateCost(const config::CostSection& c, const Usage& u) {
  Estimate e;
  e.configured = c.configured;
  e.currency = c.currency;
  if (!c.configured) return e;
  const CostValue billed = Exact(u.billed_hours);
  const CostValue months = Exact(u.calendar_hours / kHoursPerMonth);
  if (c.gpu_hour.known) {
    e.components.push_back(
        Make("compute", Times(Times(c.gpu_hour, Exact(c.gpus)), billed),
             std::to_string(c.gpus) + " GPU x " + Hours(u.billed_hours) + " x " + Spell(c.gpu_hour) + "/GPU-hour"));
  } else if (c.node_hour.known) {
    e.components.push_back(
        Make("compute", Times(c.node_hour, billed), Hours(u.billed_hours) + " x " + Spell(c.node_hour) + "/node-hour"));
  } else {
    e.components.push_back(Make("compute", CostValue{}, "cost.gpu_hour / cost.node_hour not set"));
  }
  e.components.push_back(
      Make("disk", Times(Times(c.disk_gb, c.disk_gb_month), months),
           Spell(c.disk_gb) + " GB x " + Spell(c.disk_gb_month) + "/GB-month x " + Hours(u.calendar_hours)));
  e.components.push_back(
      Make("snapshots", Times(Times(c.snapshot_gb, c.snapshot_gb_month), months),
           Spell(c.snapshot_gb) + " GB x " + Spell(c.snapshot_gb_month) + "/GB-month x " + Hours(u.calendar_hours)));
  e.components.push_back(
      Make("egress", Times(c.egress_gb, c.egress_per_gb),
           Spell(c.egress_gb) + " GB x " + Spell(c.egress_per_gb) + "/GB (not measured by spotvisor)"));
  e.components.push_back(Make("public_ip", Times(c.public_ip_hour, billed),
                              Hours(u.billed_hours) + " x " + Spell(c.public_ip_hour) + "/hour"));
  e.components.push_back(
      Make("support", Times(c.support_month, months), Spell(c.support_month) + "/month x " + Hours(u.calendar_hours)));
  for (const auto& [name, price] : c.other_hour) {
    e.components.push_back(Make(name, Times(price, billed), Hours(u.billed_hours) + " x " + Spell(price) + "/hour"));
  }
  for (const auto& name : c.unknown) e.components.push_back(Make(name, CostValue{}, "listed in cost.unknown"));
  for (const auto& comp : e.components) {
    if (comp.known) {
      e.low += comp.low;
      e.high += comp.high;
    } else {
      e.unknown.push_back(comp.name);
    }
  }
  return e;
}

std::optional<std::pair<double, double>> PerThousand(const Estimate& e, double units) {
  if (!e.configured || units <= 0) return std::nullopt;
  return std::pair{e.low / units * 1000.0, e.high / units * 1000.0};
}

std::string FormatTotal(const Estimate& e) {
  if (!e.configured) return "unknown (no cost section configured)";
  std::string out = e.low == e.high ? FormatMoney(e.low) : FormatMoney(e.low) + "-" + FormatMoney(e.high);
  out += " " + e.currency;
  if (!e.unknown.empty()) {
    std::string names;
    for (const auto& n : e.unknown) names += (names.empty() ? "" : ", ") + n;
    out += " + unknown (" + names + ")";
  }
  return out;
}

json CostSectionToJson(const config::CostSection& c) {
  json other = json::object();
  for (const auto& [name, v] : c.other_hour) other[name] = ValueToJson(v);
  json j{{"configured", c.configured},
         {"currency", c.currency},
         {"gpus", c.gpus},
         {"billing_minimum_ms", c.billing_minimum.count()},
         {"bill_from_boot", c.bill_from_boot},
         {"other_hour", other},
         {"unknown", c.unknown},
         {"budget", c.budget},
         {"warn_fraction", c.warn_fraction}};
  for (const auto& f : config::kCostFields) j[f.key] = ValueToJson(c.*f.value);
  return j;
}

Result<config::CostSection> CostSectionFromJson(const json& j) {
  config::CostSection c;
  if (!j.is_object()) return Error{"cost: expected an object"};
  try {
    c.configured = j.value("configured", false);
    c.currency = j.value("currency", std::string("USD"));
    c.gpus = j.value("gpus", 1);
    c.billing_minimum = Duration(j.value("billing_minimum_ms", std::int64_t{0}));
    c.bill_from_boot = j.value("bill_from_boot", false);
    for (const auto& f : config::kCostFields) {
      if (j.contains(f.key)) c.*f.value = ValueFromJson(j.at(f.key));
    }
    if (j.contains("other_hour")) {
      for (const auto& [name, v] : j.at("other_hour").items()) c.other_hour[name] = ValueFromJson(v);
    }
    c.unknown = j.value("unknown", std::vector<std::string>{});
    c.budget = j.value("budget", 0.0);
    c.warn_fraction = j.value("warn_fraction", 0.8);
  } catch (const json::exception& e) {
    return Error{std::string("cost: ") + e.what()};
  }
  return c;
}

json EstimateToJson(const Estimate& e) {
  json components = json::array();
  for (const auto& c : e.components) {
    json item{{"name", c.name}, {"known", c.known}, {"basis", c.basis}};
    item["low"] = c.known ? json(c.low) : json(nullptr);
    item["high"] = c.known ? json(c.high) : json(nullptr);
    components.push_back(item);
  }
  return json{{"configured", e.configured},
              {"currency", e.currency},
              {"components", components},
              {"total_low", e.low},
              {"total_high", e.Upper() ? json(*e.Upper()) : json(nullptr)},
              {"known_high", e.high},
              {"unknown", e.unknown},
              {"total_text", FormatTotal(e)}};
}

}  // namespace spotvisor::cost

// The job file's `cost:` section (see schema.hpp): prices and quantities, each a number, a
// range [low, high] or `unknown`, and the budget. Unknown keys are errors, as everywhere.
#include "node_reader.hpp"
#include "schema.hpp"

namespace spotvisor::config {
namespace {

// The tables are laid out by hand, one key per line, so clang-format leaves them alone.
// clang-format off
// A price or quantity: a number >= 0, `unknown`, or a range [low, high].
CostValue Cost(NodeReader& r, const YAML::Node& n, const std::string& key) {
  if (n.IsSequence()) {
    if (n.size() != 2) r.Fail(n, key, "a range is [low, high]");
    const double low = r.Number(n[0], key, 0, 1e15), high = r.Number(n[1], key, 0, 1e15);
    if (low > high) r.Fail(n, key, "range [low, high] has low > high");
    return CostValue{true, low, high};
  }
  if (n.IsScalar() && n.Scalar() == "unknown") return CostValue{};
  const double v = r.Number(n, key, 0, 1e15);
  return CostValue{true, v, v};
}

}  // namespace

void ReadCostSection(NodeReader& r, const YAML::Node& node, const std::string& p, CostSection& v) {
  if (node.IsNull()) return;  // `cost:` with nothing under it: no prices
  v.configured = true;
  std::map<std::string, NodeReader::Field> fields{
      {"currency", [&](const YAML::Node& n, const std::string& k) { v.currency = r.String(n, k); }},
      {"gpus", [&](const YAML::Node& n, const std::string& k) { v.gpus = r.Int(n, k, 1, 100000); }},
      {"billing_minimum", [&](const YAML::Node& n, const std::string& k) { v.billing_minimum = r.Dur(n, k); }},
      {"billing_from", [&](const YAML::Node& n, const std::string& k) {
         v.bill_from_boot = r.Enum<bool>(n, k, {{"start", false}, {"boot", true}});
       }},
      {"other_hour", [&](const YAML::Node& n, const std::string& k) {
         if (!n.IsMap()) r.Fail(n, k, "expected a mapping name: price per hour");
         for (const auto& kv : n) v.other_hour[kv.first.as<std::string>()] = Cost(r, kv.second, k + "." + kv.first.as<std::string>());
       }},
      {"unknown", [&](const YAML::Node& n, const std::string& k) { v.unknown = r.StringList(n, k); }},
      {"budget", [&](const YAML::Node& n, const std::string& k) { v.budget = r.Number(n, k, 0, 1e15); }},
      {"warn_fraction", [&](const YAML::Node& n, const std::string& k) { v.warn_fraction = r.Number(n, k, 0, 1); }},
      {"check_interval", [&](const YAML::Node& n, const std::string& k) {
         v.check_interval = r.Dur(n, k);
         if (v.check_interval.count() <= 0) r.Fail(n, k, "must be longer than 0");
       }},
  };
  for (const auto& f : kCostFields) {
    fields[f.key] = [&r, &v, f](const YAML::Node& n, const std::string& k) { v.*f.value = Cost(r, n, k); };
  }
  r.Map(node, p, fields);
  if (v.gpu_hour.known && v.node_hour.known) {
    r.Fail(node, p, "set gpu_hour or node_hour, not both (a node-hour price already includes its GPUs)");
  }
}
// clang-format on

}  // namespace spotvisor::config

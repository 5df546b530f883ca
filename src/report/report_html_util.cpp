// The HTML report's shared helpers (report_html_util.hpp).
#include "report_html_util.hpp"

#include <cmath>
#include <cstdio>

#include "spotvisor/preemption/time_format.hpp"

namespace spotvisor::report::html {

std::string Esc(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  for (const char c : s) {
    switch (c) {
      case '&':
        out += "&amp;";
        break;
      case '<':
        out += "&lt;";
        break;
      case '>':
        out += "&gt;";
        break;
      case '"':
        out += "&quot;";
        break;
      case '\'':
        out += "&#39;";
        break;
      default:
        out += c;
    }
  }
  return out;
}

std::string Text(const nlohmann::json& v, const std::string& unknown) {
  if (v.is_null()) return unknown;
  if (v.is_string()) return v.get<std::string>().empty() ? unknown : v.get<std::string>();
  if (v.is_number_float()) {
    char buf[64];
    std::snprintf(buf, sizeof buf, "%.4g", v.get<double>());
    return buf;
  }
  return v.dump();
}

std::string Field(const nlohmann::json& object, const char* key, const std::string& unknown) {
  if (!object.is_object() || !object.contains(key)) return unknown;
  return Text(object.at(key), unknown);
}

std::string GroupCell(const nlohmann::json& attempt) {
  const auto nodes = attempt.value("nodes", nlohmann::json(nullptr));
  if (!nodes.is_number() || nodes.get<int>() <= 1) return "-";
  return "epoch " + Field(attempt, "epoch") + ", " + Text(nodes) + " nodes, waited " +
         Field(attempt, "waited_for_group_s") + " s for the group";
}

std::string IsoMs(std::int64_t ms) {
  if (ms <= 0) return "unknown";
  const std::int64_t whole = ms - ((ms % 1000) + 1000) % 1000;
  std::string s = preemption::FormatIso8601(preemption::TimePoint(std::chrono::milliseconds(whole)));
  char frac[8];
  std::snprintf(frac, sizeof frac, ".%03lld", static_cast<long long>(ms - whole));
  return s.insert(s.size() - 1, frac);
}

std::string Duration(double seconds) {
  char buf[48];
  const double a = std::fabs(seconds);
  const char* sign = seconds < 0 ? "-" : "";
  if (a < 60) {
    std::snprintf(buf, sizeof buf, "%s%.1f s", sign, a);
  } else if (a < 3600) {
    std::snprintf(buf, sizeof buf, "%s%d min %02d s", sign, static_cast<int>(a / 60), static_cast<int>(a) % 60);
  } else {
    std::snprintf(buf, sizeof buf, "%s%d h %02d min", sign, static_cast<int>(a / 3600),
                  static_cast<int>(a) % 3600 / 60);
  }
  return buf;
}

std::string Num(double v, int decimals) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.*f", decimals, v);
  return buf;
}

}  // namespace spotvisor::report::html

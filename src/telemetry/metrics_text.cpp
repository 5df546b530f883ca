// Prometheus text format 0.0.4 writer; see metrics_text.hpp.
#include "spotvisor/telemetry/metrics_text.hpp"

#include <cmath>
#include <cstdio>

namespace spotvisor::telemetry {

void MetricsText::Family(std::string_view name, std::string_view type, std::string_view help) {
  family_ = std::string(name);
  std::string escaped;
  for (char c : help) {
    if (c == '\\') escaped += "\\\\";
    else if (c == '\n') escaped += "\\n";
    else escaped += c;
  }
  out_ += "# HELP " + family_ + " " + escaped + "\n# TYPE " + family_ + " " + std::string(type) + "\n";
}

void MetricsText::Sample(double value, const Labels& labels, std::string_view suffix) {
  out_ += family_;
  out_ += suffix;
  if (!labels.empty()) {
    out_ += '{';
    bool first = true;
    for (const auto& [k, v] : labels) {
      if (!first) out_ += ',';
      first = false;
      out_ += k + "=\"" + EscapeLabelValue(v) + "\"";
    }
    out_ += '}';
  }
  out_ += ' ' + FormatValue(value) + '\n';
}

std::string MetricsText::EscapeLabelValue(std::string_view value) {
  std::string out;
  for (char c : value) {
    if (c == '\\') out += "\\\\";
    else if (c == '"') out += "\\\"";
    else if (c == '\n') out += "\\n";
    else out += c;
  }
  return out;
}

std::string MetricsText::FormatValue(double value) {
  if (std::isnan(value)) return "NaN";
  if (std::isinf(value)) return value > 0 ? "+Inf" : "-Inf";
  char buf[64];
  if (value == std::floor(value) && std::fabs(value) < 1e15) {
    std::snprintf(buf, sizeof buf, "%.0f", value);
  } else {
    std::snprintf(buf, sizeof buf, "%.17g", value);
  }
  return buf;
}

}  // namespace spotvisor::telemetry

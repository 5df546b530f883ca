// Duration and size parsing for job files and flags. Overflow is checked: a duration or
// size that does not fit is an error, never a wrapped-around number.
#include "spotvisor/util/units.hpp"

#include <cctype>
#include <cmath>
#include <cstdio>
#include <limits>

namespace spotvisor {
namespace {

struct UnitScale {
  std::string_view suffix;
  double factor;
};

// Longest suffixes first so that "ms" is not read as "m" + "s".
constexpr UnitScale kDurationUnits[] = {{"ms", 1.0}, {"s", 1e3}, {"m", 60e3}, {"h", 3600e3}, {"d", 86400e3}};

constexpr UnitScale kSizeUnits[] = {
    {"KiB", 1024.0}, {"MiB", 1048576.0}, {"GiB", 1073741824.0}, {"TiB", 1099511627776.0},
    {"KB", 1e3},     {"MB", 1e6},        {"GB", 1e9},           {"TB", 1e12},
    {"K", 1024.0},   {"M", 1048576.0},   {"G", 1073741824.0},   {"T", 1099511627776.0},
    {"B", 1.0}};

// Reads a non-negative decimal number at the front of `text`; advances it.
bool TakeNumber(std::string_view& text, double& out) {
  std::size_t i = 0;
  bool digits = false;
  while (i < text.size() && std::isdigit(static_cast<unsigned char>(text[i]))) ++i, digits = true;
  if (i < text.size() && text[i] == '.') {
    ++i;
    while (i < text.size() && std::isdigit(static_cast<unsigned char>(text[i]))) ++i, digits = true;
  }
  if (!digits) return false;
  out = std::strtod(std::string(text.substr(0, i)).c_str(), nullptr);
  text.remove_prefix(i);
  return true;
}

std::string_view Trim(std::string_view s) {
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.front()))) s.remove_prefix(1);
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.back()))) s.remove_suffix(1);
  return s;
}

}  // namespace

Result<Duration> ParseDuration(std::string_view text) {
  const std::string_view original = Trim(text);
  std::string_view rest = original;
  const auto bad = [&] {
    return Error{"'" + std::string(original) + "' is not a duration (expected e.g. 250ms, 90s, 5m, 1h, 1h30m)"};
  };
  if (rest == "0") return Duration{0};
  if (rest.empty()) return bad();
  double total_ms = 0;
  while (!rest.empty()) {
    double number = 0;
    if (!TakeNumber(rest, number)) return bad();
    const UnitScale* unit = nullptr;
    for (const auto& u : kDurationUnits) {
      if (rest.substr(0, u.suffix.size()) == u.suffix) {
        unit = &u;
        break;
      }
    }
    if (unit == nullptr) return bad();
    rest.remove_prefix(unit->suffix.size());
    total_ms += number * unit->factor;
  }
  if (total_ms > static_cast<double>(std::numeric_limits<std::int64_t>::max() / 2)) {
    return Error{"'" + std::string(original) + "' is too long a duration"};
  }
  return Duration{static_cast<std::int64_t>(std::llround(total_ms))};
}

std::string FormatDuration(Duration d) {
  std::int64_t ms = d.count();
  if (ms == 0) return "0s";
  std::string out;
  if (ms < 0) {
    out = "-";
    ms = -ms;
  }
  if (ms % 1000 != 0 && ms < 1000) return out + std::to_string(ms) + "ms";
  const std::int64_t h = ms / 3600000, m = (ms / 60000) % 60, s = (ms / 1000) % 60, rest_ms = ms % 1000;
  if (h) out += std::to_string(h) + "h";
  if (m) out += std::to_string(m) + "m";
  if (s) out += std::to_string(s) + "s";
  if (rest_ms) out += std::to_string(rest_ms) + "ms";
  return out;
}

Result<std::uint64_t> ParseSize(std::string_view text) {
  const std::string_view original = Trim(text);
  std::string_view rest = original;
  const auto bad = [&] {
    return Error{"'" + std::string(original) + "' is not a size (expected e.g. 4096, 512MiB, 2GiB, 1.5GB)"};
  };
  double number = 0;
  if (!TakeNumber(rest, number)) return bad();
  rest = Trim(rest);
  double factor = 1.0;
  if (!rest.empty()) {
    const UnitScale* unit = nullptr;
    for (const auto& u : kSizeUnits) {
      if (rest == u.suffix) unit = &u;
    }
    if (unit == nullptr) return bad();
    factor = unit->factor;
  }
  const double bytes = number * factor;
  if (bytes >= 1.8e19) return Error{"'" + std::string(original) + "' is too large a size"};
  return static_cast<std::uint64_t>(std::llround(bytes));
}

std::string FormatSize(std::uint64_t bytes) {
  constexpr const char* kNames[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB"};
  double value = static_cast<double>(bytes);
  int unit = 0;
  while (value >= 1024.0 && unit < 5) value /= 1024.0, ++unit;
  char buf[32];
  if (unit == 0) {
    std::snprintf(buf, sizeof buf, "%llu B", static_cast<unsigned long long>(bytes));
  } else {
    std::snprintf(buf, sizeof buf, "%.1f %s", value, kNames[unit]);
  }
  return buf;
}

std::string FormatRate(double rate) {
  static const char* kUnits[] = {"B/s", "KiB/s", "MiB/s", "GiB/s", "TiB/s"};
  int unit = 0;
  while (rate >= 1024 && unit < 4) rate /= 1024, ++unit;
  char buf[32];
  std::snprintf(buf, sizeof buf, rate < 10 && unit > 0 ? "%.1f %s" : "%.0f %s", rate, kUnits[unit]);
  return buf;
}

}  // namespace spotvisor

// spdlog setup and the two line formats; see log.hpp.
#include "spotvisor/log/log.hpp"

#include <spdlog/formatter.h>
#include <spdlog/sinks/stdout_sinks.h>
#include <spdlog/spdlog.h>

#include <chrono>
#include <nlohmann/json.hpp>

namespace spotvisor::log {
namespace {

std::string g_job;  // carried by every JSON line; set once at start

spdlog::level::level_enum ToSpd(LogLevel level) {
  switch (level) {
    case LogLevel::kDebug:
      return spdlog::level::debug;
    case LogLevel::kInfo:
      return spdlog::level::info;
    case LogLevel::kWarning:
      return spdlog::level::warn;
    case LogLevel::kError:
      return spdlog::level::err;
    case LogLevel::kCritical:
      return spdlog::level::critical;
  }
  return spdlog::level::info;
}

const char* LevelName(spdlog::level::level_enum level) {
  switch (level) {
    case spdlog::level::trace:
    case spdlog::level::debug:
      return "debug";
    case spdlog::level::warn:
      return "warning";
    case spdlog::level::err:
      return "error";
    case spdlog::level::critical:
      return "critical";
    default:
      return "info";
  }
}

// A field value that reads as a number is one in JSON ("attempt":2); leading zeros, huge
// values and everything else stay strings.
nlohmann::json JsonValue(const std::string& v) {
  std::size_t i = v.size() > 1 && v[0] == '-' ? 1 : 0;
  const std::size_t digits_start = i;
  while (i < v.size() && v[i] >= '0' && v[i] <= '9') ++i;
  const std::size_t int_digits = i - digits_start;
  bool fraction = false;
  if (int_digits > 0 && i + 1 < v.size() && v[i] == '.') {
    const std::size_t dot = i++;
    while (i < v.size() && v[i] >= '0' && v[i] <= '9') ++i;
    fraction = i > dot + 1;
  }
  const bool leading_zero = int_digits > 1 && v[digits_start] == '0';
  if (int_digits == 0 || i != v.size() || leading_zero || v.size() > 15) return v;
  if (fraction) return std::stod(v);
  return std::stoll(v);
}

// JSON lines for every message the logger sees, ours (key=value fields) and the library's
// own: one object with ts, level, job and the fields.
class JsonFormatter final : public spdlog::formatter {
 public:
  void format(const spdlog::details::log_msg& msg, spdlog::memory_buf_t& dest) override {
    nlohmann::json j;
    j["ts"] = std::chrono::duration_cast<std::chrono::milliseconds>(msg.time.time_since_epoch()).count() / 1000.0;
    j["level"] = LevelName(msg.level);
    if (!g_job.empty()) j["job"] = g_job;
    const std::string_view payload(msg.payload.data(), msg.payload.size());
    const auto fields = ParseFields(payload);
    if (fields.empty()) j["message"] = std::string(payload);
    for (const auto& [k, v] : fields) j[k] = JsonValue(v);
    const std::string line = j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) + "\n";
    dest.append(line.data(), line.data() + line.size());
  }
  std::unique_ptr<spdlog::formatter> clone() const override { return std::make_unique<JsonFormatter>(); }
};

}  // namespace

void ConfigureLogging(LogFormat format, const std::string& level, const std::string& job) {
  g_job = job;
  auto logger = spdlog::get("spotvisor");
  if (!logger) {
    logger = spdlog::stderr_logger_mt("spotvisor");
    spdlog::set_default_logger(logger);
  }
  if (format == LogFormat::kJson) {
    logger->set_formatter(std::make_unique<JsonFormatter>());
  } else {
    // The job name goes into the pattern, so the library's own lines carry it too.
    std::string prefix = job.empty() ? "" : "job=" + Quote(job) + " ";
    for (std::size_t at = prefix.find('%'); at != std::string::npos; at = prefix.find('%', at + 2)) {
      prefix.insert(at, "%");
    }
    logger->set_pattern("%Y-%m-%dT%H:%M:%S.%eZ %-7l spotvisor " + prefix + "%v", spdlog::pattern_time_type::utc);
  }
  logger->set_level(spdlog::level::from_str(level == "warning" ? "warn" : level == "error" ? "err" : level));
  logger->flush_on(spdlog::level::debug);
}

std::map<std::string, std::string> ParseFields(std::string_view s) {
  std::map<std::string, std::string> out;
  std::size_t i = 0;
  while (i < s.size()) {
    while (i < s.size() && s[i] == ' ') ++i;
    const auto eq = s.find('=', i);
    if (eq == std::string_view::npos) break;
    std::string key(s.substr(i, eq - i));
    i = eq + 1;
    std::string value;
    if (i < s.size() && s[i] == '"') {
      ++i;
      while (i < s.size() && s[i] != '"') {
        if (s[i] == '\\' && i + 1 < s.size()) ++i;
        value += s[i++];
      }
      ++i;
    } else {
      while (i < s.size() && s[i] != ' ') value += s[i++];
    }
    out[key] = value;
  }
  return out;
}

std::string Quote(std::string_view value) {
  if (!value.empty() && value.find_first_of(" \"\\=") == std::string_view::npos) return std::string(value);
  std::string out = "\"";
  for (char c : value) {
    if (c == '"' || c == '\\') out += '\\';
    out += c == '\n' ? ' ' : c;
  }
  return out + "\"";
}

void Log(LogLevel level, std::string_view fields) {
  auto logger = spdlog::default_logger_raw();
  if (!logger->should_log(ToSpd(level))) return;
  logger->log(ToSpd(level), "{}", fields);  // the formatter adds time, level and job
}

}  // namespace spotvisor::log

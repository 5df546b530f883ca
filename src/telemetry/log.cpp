// spdlog setup and the two line formats; see log.hpp.
#include "spotvisor/telemetry/log.hpp"

#include <spdlog/sinks/stdout_sinks.h>
#include <spdlog/spdlog.h>

#include <nlohmann/json.hpp>

namespace spotvisor::telemetry {
namespace {

config::LogFormat g_format = config::LogFormat::kText;  // set once at start, read by Log
std::string g_job;                                      // carried by every line

spdlog::level::level_enum ToSpd(LogLevel level) {
  switch (level) {
    case LogLevel::kDebug: return spdlog::level::debug;
    case LogLevel::kInfo: return spdlog::level::info;
    case LogLevel::kWarning: return spdlog::level::warn;
    case LogLevel::kError: return spdlog::level::err;
    case LogLevel::kCritical: return spdlog::level::critical;
  }
  return spdlog::level::info;
}

const char* LevelName(LogLevel level) {
  switch (level) {
    case LogLevel::kDebug: return "debug";
    case LogLevel::kInfo: return "info";
    case LogLevel::kWarning: return "warning";
    case LogLevel::kError: return "error";
    case LogLevel::kCritical: return "critical";
  }
  return "info";
}

}  // namespace

void ConfigureLogging(config::LogFormat format, const std::string& level, const std::string& job) {
  g_format = format;
  g_job = job;
  auto logger = spdlog::get("spotvisor");
  if (!logger) {
    logger = spdlog::stderr_logger_mt("spotvisor");
    spdlog::set_default_logger(logger);
  }
  if (format == config::LogFormat::kJson) {
    logger->set_pattern("%v");
  } else {
    logger->set_pattern("%Y-%m-%dT%H:%M:%S.%eZ %-7l spotvisor %v", spdlog::pattern_time_type::utc);
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
  if (g_format == config::LogFormat::kJson) {
    nlohmann::json j;
    j["ts"] = std::chrono::duration_cast<std::chrono::milliseconds>(
                  std::chrono::system_clock::now().time_since_epoch()).count() / 1000.0;
    j["level"] = LevelName(level);
    if (!g_job.empty()) j["job"] = g_job;
    for (const auto& [k, v] : ParseFields(fields)) j[k] = v;
    logger->log(ToSpd(level), "{}", j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace));
  } else {
    logger->log(ToSpd(level), "{}{}", g_job.empty() ? "" : "job=" + Quote(g_job) + " ", fields);
  }
}

}  // namespace spotvisor::telemetry

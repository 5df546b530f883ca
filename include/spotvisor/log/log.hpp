// Structured logging: every event is one line of `key=value` fields ("event=restart
// delay=2s"), printed to stderr as text for people or as JSON lines for machines. Level
// policy (STYLE.md): critical = cannot supervise, error = an operation failed but the
// service goes on, warning = unexpected but handled, info = golden path, debug = detail.
// Never pass a secret. Any thread (spdlog's logger is thread-safe).
#pragma once

#include <map>
#include <string>
#include <string_view>

namespace spotvisor::log {

enum class LogLevel { kDebug, kInfo, kWarning, kError, kCritical };

// `logging.format`: text lines for people, JSON lines for machines.
enum class LogFormat { kText, kJson };

// Sets the format, level and the job name every line carries. Safe to call again.
void ConfigureLogging(LogFormat format, const std::string& level, const std::string& job);

// `fields` is "key=value key2=\"a value with spaces\" ...".
void Log(LogLevel level, std::string_view fields);

// Splits "k=v k2=\"x y\"" into a map (the JSON format uses it; so do tests).
std::map<std::string, std::string> ParseFields(std::string_view fields);

// Quotes a value for a key=value line when it needs it.
std::string Quote(std::string_view value);

}  // namespace spotvisor::log

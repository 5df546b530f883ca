// The two time formats metadata services use: ISO-8601/RFC 3339 (AWS `time`, Alibaba
// `termination-time`, AWS `noticeTime`) and RFC 1123 (Azure `NotBefore`). Pure functions,
// any thread; bounded input, no exceptions (fuzzed in tests/fuzz/).
#pragma once

#include <chrono>
#include <string>
#include <string_view>

#include "spotvisor/util/result.hpp"

namespace spotvisor::preemption {

using TimePoint = std::chrono::system_clock::time_point;

// "2017-09-18T08:22:00Z", "2017-09-18T08:22:00.123+02:00", "2017-09-18 08:22:00z".
// Years 1900..2200; a leap second (":60") is read as ":59". Surrounding whitespace is ignored.
Result<TimePoint> ParseIso8601(std::string_view text);

// "Tue, 16 Mar 2021 00:58:46 GMT" (day name optional; zone GMT, UT, UTC, Z or +hhmm).
Result<TimePoint> ParseRfc1123(std::string_view text);

// "2017-09-18T08:22:00Z" (whole seconds, UTC).
std::string FormatIso8601(TimePoint t);
// "Tue, 16 Mar 2021 00:58:46 GMT".
std::string FormatRfc1123(TimePoint t);

}  // namespace spotvisor::preemption

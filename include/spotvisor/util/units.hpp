// Parsing and printing of the human units a job file uses: durations (`250ms`, `90s`,
// `5m`, `1h`, `1h30m`) and sizes (`512MiB`, `2GB`, `4096`). Pure functions, any thread.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>
#include <string_view>

#include "spotvisor/util/result.hpp"

namespace spotvisor {

using Duration = std::chrono::milliseconds;

// "250ms", "90s", "5m", "1h", "2d", "1h30m", "0". A bare number other than 0 is refused
// because its unit would be a guess.
Result<Duration> ParseDuration(std::string_view text);
// The shortest exact spelling: 90000ms -> "90s", 5400000ms -> "1h30m".
std::string FormatDuration(Duration d);

// "512MiB", "2GiB", "1.5GB", "4096" (bytes). Binary and decimal prefixes both accepted.
Result<std::uint64_t> ParseSize(std::string_view text);
// "1.5 GiB" style, for people.
std::string FormatSize(std::uint64_t bytes);
// "850 MiB/s", "1.2 GiB/s", "12 KiB/s".
std::string FormatRate(double bytes_per_second);

}  // namespace spotvisor

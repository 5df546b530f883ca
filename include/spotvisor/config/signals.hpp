// Signal names as job files and logs spell them. Pure; any thread.
#pragma once

#include <string>

#include "spotvisor/util/result.hpp"

namespace spotvisor::config {

// "SIGTERM", "TERM", "15" -> 15. Error names the value.
Result<int> ParseSignal(const std::string& text);
// 15 -> "SIGTERM", 35 -> "SIGRTMIN+1"; a number with no name -> "42".
std::string SignalName(int signo);

}  // namespace spotvisor::config

// Small text helpers shared by modules that parse outside input.
#pragma once

#include <cctype>
#include <string>

namespace spotvisor {

// `s` with ASCII letters lowered (DMI strings, HTTP header names, event kinds).
inline std::string AsciiLower(std::string s) {
  for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

}  // namespace spotvisor

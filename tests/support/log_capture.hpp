// Test support: the log lines of the program's default spdlog logger while alive.
#pragma once

#include <memory>
#include <string>
#include <vector>

namespace spotvisor::testing {

// Captures log lines of the library's default spdlog logger while alive.
class LogCapture {
 public:
  LogCapture();
  ~LogCapture();
  std::vector<std::string> Lines() const;
  int Count(const std::string& needle) const;  // lines containing `needle`
  std::string Joined() const;                  // all lines, for failure messages

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace spotvisor::testing

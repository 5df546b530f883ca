// Test support: the log lines of the program's default spdlog logger while alive.
#pragma once

#include <functional>
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
  // Called with each line as it is logged, on the logging thread (one at a time).
  void OnLine(std::function<void(const std::string&)> fn);
  std::string Joined() const;  // all lines, for failure messages

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace spotvisor::testing

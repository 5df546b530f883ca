// Signal names in job files and flags: "SIGTERM", "TERM", "sigterm" or a number.
#include "spotvisor/config/signals.hpp"

#include <csignal>
#include <cstring>
#include <string>

namespace spotvisor::config {
namespace {

struct NamedSignal {
  const char* name;
  int number;
};

constexpr NamedSignal kSignals[] = {{"HUP", SIGHUP},   {"INT", SIGINT},   {"QUIT", SIGQUIT}, {"KILL", SIGKILL},
                                    {"USR1", SIGUSR1}, {"USR2", SIGUSR2}, {"TERM", SIGTERM}, {"ALRM", SIGALRM},
                                    {"CONT", SIGCONT}, {"STOP", SIGSTOP}, {"TSTP", SIGTSTP}, {"WINCH", SIGWINCH},
                                    {"PWR", SIGPWR},   {"XCPU", SIGXCPU}, {"URG", SIGURG}};

}  // namespace

Result<int> ParseSignal(const std::string& text) {
  std::string upper;
  for (char c : text) upper += static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  const std::string bare = upper.rfind("SIG", 0) == 0 ? upper.substr(3) : upper;
  for (const auto& s : kSignals) {
    if (bare == s.name) return s.number;
  }
  if (!bare.empty() && bare.find_first_not_of("0123456789") == std::string::npos && bare.size() < 4) {
    const int n = std::stoi(bare);
    if (n > 0 && n < NSIG) return n;
  }
  if (bare.rfind("RTMIN+", 0) == 0 && bare.size() > 6 && bare.find_first_not_of("0123456789", 6) == std::string::npos &&
      bare.size() < 9) {
    const int n = SIGRTMIN + std::stoi(bare.substr(6));
    if (n <= SIGRTMAX) return n;
  }
  return Error{"'" + text + "' is not a signal name (expected e.g. SIGTERM, SIGINT, SIGUSR1, SIGUSR2)"};
}

std::string SignalName(int signo) {
  for (const auto& s : kSignals) {
    if (s.number == signo) return std::string("SIG") + s.name;
  }
  if (signo >= SIGRTMIN && signo <= SIGRTMAX) return "SIGRTMIN+" + std::to_string(signo - SIGRTMIN);
  return std::to_string(signo);
}

}  // namespace spotvisor::config

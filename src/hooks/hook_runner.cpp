// Hooks on the one command runner; see hook_runner.hpp. What is a hook's own: the name
// that runs once at a time, its log lines (hook_started, hook_output, hook_timeout,
// hook_finished/hook_failed) and the HookResult. io thread only.
#include "spotvisor/hooks/hook_runner.hpp"

#include <signal.h>

#include <memory>
#include <set>
#include <string_view>

#include "spotvisor/config/signals.hpp"
#include "spotvisor/log/log.hpp"
#include "spotvisor/process/command.hpp"

namespace spotvisor::hooks {
namespace {

using log::Log;
using log::LogLevel;
using log::Quote;

constexpr std::size_t kMaxLineBytes = 2000;
constexpr int kMaxLoggedLines = 200;

std::string Join(const std::vector<std::string>& argv) {
  std::string s;
  for (const auto& a : argv) s += (s.empty() ? "" : " ") + a;
  return s;
}

// One output line of hook `name` to the log; `lines` counts them (the first 200 are logged).
void LogLine(const std::string& name, int& lines, std::string_view text) {
  std::string line(text);
  if (!line.empty() && line.back() == '\r') line.pop_back();
  if (++lines > kMaxLoggedLines) {
    if (lines == kMaxLoggedLines + 1) {
      Log(LogLevel::kInfo, "event=hook_output hook=" + name + " line=\"(further output not logged)\"");
    }
    return;
  }
  if (line.size() > kMaxLineBytes) line = line.substr(0, kMaxLineBytes) + "...";
  Log(LogLevel::kInfo, "event=hook_output hook=" + name + " line=" + Quote(line));
}

HookResult ResultOf(const std::string& name, const process::CommandOutcome& o) {
  HookResult result;
  result.hook = name;
  result.duration = o.duration;
  switch (o.end) {
    case process::CommandEnd::kExited:
      result.exit_code = o.exit_code;
      result.outcome = o.exit_code == 0 ? "ok" : "failed";
      result.message = "exit code " + std::to_string(o.exit_code);
      break;
    case process::CommandEnd::kTimedOut:
      result.signal = o.signal;
      result.outcome = "timeout";
      result.message = "killed after its " + FormatDuration(o.timeout) + " timeout";
      break;
    case process::CommandEnd::kSignaled:
    case process::CommandEnd::kCancelled:  // KillAll at shutdown
      result.signal = o.signal;
      result.outcome = "failed";
      result.message = "killed by " + config::SignalName(o.signal ? o.signal : SIGKILL);
      break;
    case process::CommandEnd::kSpawnFailed:
      result.outcome = "spawn-failed";
      result.message = o.error;
      break;
  }
  return result;
}

void LogEnd(const HookResult& r, Duration timeout) {
  if (r.outcome == "spawn-failed") {
    Log(LogLevel::kError, "event=hook_failed hook=" + r.hook + " outcome=spawn-failed error=" + Quote(r.message));
    return;
  }
  if (r.outcome == "timeout") {
    Log(LogLevel::kError, "event=hook_timeout hook=" + r.hook + " timeout=" + FormatDuration(timeout) +
                              " action=\"SIGKILL to its process group\"");
  }
  const bool ok = r.outcome == "ok";
  Log(ok ? LogLevel::kInfo : LogLevel::kError,
      std::string(ok ? "event=hook_finished" : "event=hook_failed") + " hook=" + r.hook + " outcome=" + r.outcome +
          " status=" + Quote(r.message) + " duration_ms=" + std::to_string(r.duration.count()));
}

}  // namespace

struct HookRunner::Impl {
  Impl(boost::asio::io_context& io, process::ChildTable& children, std::filesystem::path workdir_in,
       std::map<std::string, std::string> env_in)
      : workdir(std::move(workdir_in)), env(std::move(env_in)), commands(process::MakeCommandRunner(io, children)) {}

  void Run(const std::string& name, const std::vector<std::string>& argv, Duration timeout,
           const std::map<std::string, std::string>& extra, Done done) {
    if (running.count(name)) {
      HookResult result{name,         "skipped",   std::nullopt,
                        std::nullopt, Duration(0), "the previous " + name + " hook is still running"};
      Log(LogLevel::kWarning, "event=hook_skipped hook=" + name + " reason=" + Quote(result.message));
      done(result);
      return;
    }
    process::CommandSpec spec;
    spec.argv = argv;
    spec.workdir = workdir;
    spec.env = env;
    for (const auto& [k, v] : extra) spec.env[k] = v;
    spec.timeout = timeout;
    spec.on_line = [name, lines = std::make_shared<int>(0)](std::string_view line) { LogLine(name, *lines, line); };
    running.insert(name);
    const auto id = commands->Start(spec, [this, name, done = std::move(done)](const process::CommandOutcome& o) {
      running.erase(name);
      const HookResult result = ResultOf(name, o);
      LogEnd(result, o.timeout);
      done(result);
    });
    if (const pid_t pid = commands->pid(id); pid > 0) {
      Log(LogLevel::kInfo, "event=hook_started hook=" + name + " pid=" + std::to_string(pid) +
                               " timeout=" + FormatDuration(timeout) + " argv=" + Quote(Join(argv)));
    }
  }

  std::filesystem::path workdir;                     // where hooks start
  std::map<std::string, std::string> env;            // added to our environment
  std::set<std::string> running;                     // hook names started and not finished
  std::unique_ptr<process::CommandRunner> commands;  // last: gone first, with its callbacks
};

HookRunner::HookRunner(boost::asio::io_context& io, process::ChildTable& children, std::filesystem::path workdir,
                       std::map<std::string, std::string> env)
    : impl_(std::make_unique<Impl>(io, children, std::move(workdir), std::move(env))) {}

HookRunner::~HookRunner() = default;

void HookRunner::Run(const std::string& name, const std::vector<std::string>& argv, Duration timeout,
                     const std::map<std::string, std::string>& env, Done done) {
  impl_->Run(name, argv, timeout, env, std::move(done));
}

void HookRunner::KillAll() { impl_->commands->CancelAll(); }

std::size_t HookRunner::running() const { return impl_->running.size(); }

}  // namespace spotvisor::hooks

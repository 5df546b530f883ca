// Hook processes: started through the child table (own group, stdin /dev/null, stdout and
// stderr into one pipe); their exit status comes from the table's Reap, posted back here;
// the output pipe is read by Asio; a timer per hook. See hook_runner.hpp. io thread only.
#include "spotvisor/hooks/hook_runner.hpp"

#include <signal.h>
#include <sys/wait.h>

#include <array>
#include <boost/asio/io_context.hpp>
#include <boost/asio/posix/stream_descriptor.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/signal_set.hpp>
#include <boost/asio/steady_timer.hpp>

#include "spotvisor/config/signals.hpp"
#include "spotvisor/log/log.hpp"
#include "spotvisor/process/child_table.hpp"

namespace spotvisor::hooks {
namespace {

namespace asio = boost::asio;
using log::Log;
using log::LogLevel;
using log::Quote;
using std::chrono::steady_clock;

constexpr std::size_t kMaxLineBytes = 2000;
constexpr int kMaxLoggedLines = 200;
constexpr auto kDrainAfterExit = std::chrono::seconds(2);

}  // namespace

struct HookRunner::Impl {
  struct Running {
    Running(Impl& runner, asio::io_context& io) : owner(runner), output(io), timer(io) {}
    Impl& owner;
    std::string name;
    pid_t pid = 0;
    asio::posix::stream_descriptor output;  // stdout + stderr
    asio::steady_timer timer;               // timeout, then drain deadline
    std::array<char, 4096> buffer{};
    std::string partial;  // an unfinished output line
    int lines = 0;
    bool timed_out = false, exited = false, output_closed = false;
    int wait_status = 0;  // from the child table, once exited
    steady_clock::time_point started;
    Duration timeout{0};
    Done done;
  };

  Impl(asio::io_context& io_in, process::ChildTable& children_in, std::filesystem::path workdir_in,
       std::map<std::string, std::string> env_in)
      : io(io_in),
        children(children_in),
        sigchld(io_in, SIGCHLD),
        workdir(std::move(workdir_in)),
        env(std::move(env_in)) {}

  void Run(const std::string& name, const std::vector<std::string>& argv, Duration timeout,
           const std::map<std::string, std::string>& extra, Done done) {
    HookResult result;
    result.hook = name;
    if (running.count(name)) {
      result.outcome = "skipped";
      result.message = "the previous " + name + " hook is still running";
      Log(LogLevel::kWarning, "event=hook_skipped hook=" + name + " reason=" + Quote(result.message));
      done(result);
      return;
    }
    if (argv.empty()) return SpawnFailed(result, "empty command", done);
    process::SpawnSpec spec;
    spec.argv = argv;
    spec.workdir = workdir;
    spec.env = env;
    for (const auto& [k, v] : extra) spec.env[k] = v;
    spec.pipe_output = true;
    spec.merge_output = true;
    spec.null_stdin = true;
    auto r = std::make_shared<Running>(*this, io);
    // The table calls from whichever thread reaped; the hook is finished on ours.
    auto child = children.Spawn(spec, [weak = std::weak_ptr<Running>(r), &loop = io](int wait_status) {
      asio::post(loop, [weak, wait_status] {
        if (auto hook = weak.lock()) hook->owner.Exited(hook, wait_status);
      });
    });
    if (!child) return SpawnFailed(result, child.error().message, done);
    r->output.assign(child->stdout_fd);
    r->name = name;
    r->pid = child->pid;
    r->started = steady_clock::now();
    r->timeout = timeout;
    r->done = std::move(done);
    running[name] = r;
    WaitForChildren();
    Log(LogLevel::kInfo, "event=hook_started hook=" + name + " pid=" + std::to_string(r->pid) +
                             " timeout=" + FormatDuration(timeout) + " argv=" + Quote(Join(argv)));
    r->timer.expires_after(timeout);
    r->timer.async_wait([r](const boost::system::error_code& ec) {
      if (ec || r->exited) return;
      r->timed_out = true;
      kill(-r->pid, SIGKILL);
      Log(LogLevel::kError, "event=hook_timeout hook=" + r->name + " timeout=" + FormatDuration(r->timeout) +
                                " action=\"SIGKILL to its process group\"");
    });
    ReadOutput(r);
  }

  // Reaps on SIGCHLD while hooks run: the driver does too, but not while its io_context
  // waits for a before_start hook on a private one. Reap is harmless twice.
  void WaitForChildren() {
    if (waiting) return;
    waiting = true;
    sigchld.async_wait([this](const boost::system::error_code& ec, int) {
      waiting = false;
      if (!ec) children.Reap();
      if (!running.empty()) WaitForChildren();  // also after a cancel that a new hook overtook
    });
  }

  static std::string Join(const std::vector<std::string>& argv) {
    std::string s;
    for (const auto& a : argv) s += (s.empty() ? "" : " ") + a;
    return s;
  }

  void SpawnFailed(HookResult& result, const std::string& why, const Done& done) {
    result.outcome = "spawn-failed";
    result.message = why;
    Log(LogLevel::kError, "event=hook_failed hook=" + result.hook + " outcome=spawn-failed error=" + Quote(why));
    done(result);
  }

  void ReadOutput(const std::shared_ptr<Running>& r) {
    r->output.async_read_some(asio::buffer(r->buffer), [this, r](const boost::system::error_code& ec, std::size_t n) {
      if (ec) {
        if (!r->partial.empty()) LogLine(*r, r->partial);
        r->partial.clear();
        r->output_closed = true;
        MaybeDone(r);
        return;
      }
      r->partial.append(r->buffer.data(), n);
      std::size_t nl;
      while ((nl = r->partial.find('\n')) != std::string::npos) {
        LogLine(*r, r->partial.substr(0, nl));
        r->partial.erase(0, nl + 1);
      }
      if (r->partial.size() > kMaxLineBytes) {
        LogLine(*r, r->partial);
        r->partial.clear();
      }
      ReadOutput(r);
    });
  }

  void LogLine(Running& r, std::string line) {
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (++r.lines > kMaxLoggedLines) {
      if (r.lines == kMaxLoggedLines + 1) {
        Log(LogLevel::kInfo, "event=hook_output hook=" + r.name + " line=\"(further output not logged)\"");
      }
      return;
    }
    if (line.size() > kMaxLineBytes) line = line.substr(0, kMaxLineBytes) + "...";
    Log(LogLevel::kInfo, "event=hook_output hook=" + r.name + " line=" + Quote(line));
  }

  void Exited(const std::shared_ptr<Running>& r, int wait_status) {
    r->exited = true;
    r->wait_status = wait_status;
    r->timer.cancel();
    kill(-r->pid, SIGKILL);  // leftovers of the hook's group do not outlive it
    if (!r->output_closed) {
      r->timer.expires_after(kDrainAfterExit);  // a process that left the group may hold the pipe
      r->timer.async_wait([r](const boost::system::error_code& e) {
        if (!e) r->output.close();
      });
    }
    MaybeDone(r);
  }

  void MaybeDone(const std::shared_ptr<Running>& r) {
    if (!r->exited || !r->output_closed) return;
    r->timer.cancel();
    HookResult result;
    result.hook = r->name;
    result.duration = std::chrono::duration_cast<Duration>(steady_clock::now() - r->started);
    const int status = r->wait_status;
    if (WIFEXITED(status)) {
      result.exit_code = WEXITSTATUS(status);
      result.outcome = *result.exit_code == 0 ? "ok" : "failed";
      result.message = "exit code " + std::to_string(*result.exit_code);
    } else {
      result.signal = WTERMSIG(status);
      result.outcome = r->timed_out ? "timeout" : "failed";
      result.message = r->timed_out ? "killed after its " + FormatDuration(r->timeout) + " timeout"
                                    : "killed by " + config::SignalName(*result.signal);
    }
    const LogLevel level = result.outcome == "ok" ? LogLevel::kInfo : LogLevel::kError;
    Log(level, std::string(result.outcome == "ok" ? "event=hook_finished" : "event=hook_failed") + " hook=" + r->name +
                   " outcome=" + result.outcome + " status=" + Quote(result.message) +
                   " duration_ms=" + std::to_string(result.duration.count()));
    running.erase(r->name);
    if (running.empty()) sigchld.cancel();  // nothing of ours keeps the io_context busy
    r->done(result);
  }

  asio::io_context& io;
  process::ChildTable& children;                            // starts and reaps the hooks
  asio::signal_set sigchld;                                 // reaping while hooks run
  bool waiting = false;                                     // a SIGCHLD wait is pending
  std::filesystem::path workdir;                            // where hooks start
  std::map<std::string, std::string> env;                   // added to our environment
  std::map<std::string, std::shared_ptr<Running>> running;  // by hook name
};

HookRunner::HookRunner(asio::io_context& io, process::ChildTable& children, std::filesystem::path workdir,
                       std::map<std::string, std::string> env)
    : impl_(std::make_unique<Impl>(io, children, std::move(workdir), std::move(env))) {}

HookRunner::~HookRunner() {
  KillAll();
  for (auto& [name, r] : impl_->running) {
    if (!r->exited) impl_->children.Unwatch(r->pid);
  }
}

void HookRunner::Run(const std::string& name, const std::vector<std::string>& argv, Duration timeout,
                     const std::map<std::string, std::string>& env, Done done) {
  impl_->Run(name, argv, timeout, env, std::move(done));
}

void HookRunner::KillAll() {
  for (auto& [name, r] : impl_->running) {
    if (!r->exited) kill(-r->pid, SIGKILL);
  }
}

std::size_t HookRunner::running() const { return impl_->running.size(); }

}  // namespace spotvisor::hooks

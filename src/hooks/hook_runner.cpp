// Hook processes: clone3(CLONE_PIDFD) with exit_signal 0, so that only our waitid(P_PIDFD,
// __WALL) sees them; a pidfd and the output pipe watched by Asio; a timer per hook. See
// hook_runner.hpp. io thread only.
#include "spotvisor/hooks/hook_runner.hpp"

#include <fcntl.h>
#include <linux/sched.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <boost/asio/io_context.hpp>
#include <boost/asio/posix/stream_descriptor.hpp>
#include <boost/asio/steady_timer.hpp>
#include <array>
#include <cerrno>
#include <cstring>

#include "spotvisor/config/signals.hpp"
#include "spotvisor/process/spawn.hpp"
#include "spotvisor/telemetry/log.hpp"

extern char** environ;

namespace spotvisor::hooks {
namespace {

namespace asio = boost::asio;
using telemetry::Log;
using telemetry::LogLevel;
using telemetry::Quote;
using std::chrono::steady_clock;

constexpr std::size_t kMaxLineBytes = 2000;
constexpr int kMaxLoggedLines = 200;
constexpr auto kDrainAfterExit = std::chrono::seconds(2);

// What exec needs, prepared before the clone (the child may only make syscalls).
struct ExecImage {
  std::string path;
  std::vector<std::string> argv_storage, env_storage;
  std::vector<char*> argv, envp;
};

ExecImage Prepare(const std::string& path, const std::vector<std::string>& argv,
                  const std::map<std::string, std::string>& env) {
  ExecImage image;
  image.path = path;
  image.argv_storage = argv;
  std::map<std::string, std::string> merged;
  for (char** e = environ; e && *e; ++e) {
    const std::string kv(*e);
    const auto eq = kv.find('=');
    if (eq != std::string::npos) merged[kv.substr(0, eq)] = kv.substr(eq + 1);
  }
  for (const auto& [k, v] : env) merged[k] = v;
  for (const auto& [k, v] : merged) image.env_storage.push_back(k + "=" + v);
  for (auto& a : image.argv_storage) image.argv.push_back(a.data());
  image.argv.push_back(nullptr);
  for (auto& e : image.env_storage) image.envp.push_back(e.data());
  image.envp.push_back(nullptr);
  return image;
}

struct CloneArgs {  // struct clone_args, CLONE_ARGS_SIZE_VER0
  std::uint64_t flags, pidfd, child_tid, parent_tid, exit_signal, stack, stack_size, tls;
};

// In the child: own group, die with us, clean signal state, output to the pipe, exec.
[[noreturn]] void ChildExec(const ExecImage& image, const std::string& workdir, int out_fd, int null_fd, int err_fd,
                            pid_t parent) {
  setpgid(0, 0);
  prctl(PR_SET_PDEATHSIG, SIGKILL);
  if (getppid() != parent) _exit(127);
  sigset_t empty;
  sigemptyset(&empty);
  sigprocmask(SIG_SETMASK, &empty, nullptr);
  for (int s = 1; s < NSIG; ++s) signal(s, SIG_DFL);
  dup2(null_fd, 0);
  dup2(out_fd, 1);
  dup2(out_fd, 2);
  if (chdir(workdir.c_str()) == 0) execve(image.path.c_str(), image.argv.data(), image.envp.data());
  const int err = errno;
  [[maybe_unused]] ssize_t n = write(err_fd, &err, sizeof err);
  _exit(127);
}

}  // namespace

struct HookRunner::Impl {
  struct Running {
    Running(asio::io_context& io, int pidfd, int out) : pid_stream(io, pidfd), output(io, out), timer(io) {}
    std::string name;
    pid_t pid = 0;
    asio::posix::stream_descriptor pid_stream;  // readable once the hook exited
    asio::posix::stream_descriptor output;      // stdout + stderr
    asio::steady_timer timer;                   // timeout, then drain deadline
    std::array<char, 4096> buffer{};
    std::string partial;                        // an unfinished output line
    int lines = 0;
    bool timed_out = false, exited = false, output_closed = false;
    std::string exec_error;                     // exec failed: why
    siginfo_t info{};
    steady_clock::time_point started;
    Duration timeout{0};
    Done done;
  };

  Impl(asio::io_context& io_in, std::filesystem::path workdir_in, std::map<std::string, std::string> env_in)
      : io(io_in), workdir(std::move(workdir_in)), env(std::move(env_in)) {}

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
    auto exe = argv.empty() ? Result<std::filesystem::path>(Error{"empty command"})
                            : process::ResolveExecutable(argv.front(), workdir);
    if (!exe) return SpawnFailed(result, exe.error().message, done);
    auto merged = env;
    for (const auto& [k, v] : extra) merged[k] = v;
    const ExecImage image = Prepare(exe->string(), argv, merged);
    int out[2], err[2];
    if (pipe2(out, O_CLOEXEC) != 0) return SpawnFailed(result, std::string("pipe: ") + std::strerror(errno), done);
    if (pipe2(err, O_CLOEXEC) != 0) {
      close(out[0]), close(out[1]);
      return SpawnFailed(result, std::string("pipe: ") + std::strerror(errno), done);
    }
    const int null_fd = open("/dev/null", O_RDONLY | O_CLOEXEC);
    int pidfd = -1;
    CloneArgs args{};
    args.flags = CLONE_PIDFD;
    args.pidfd = reinterpret_cast<std::uint64_t>(&pidfd);
    args.exit_signal = 0;  // a "clone child": invisible to waitpid(-1) without __WALL
    const pid_t parent = getpid();
    const long pid = syscall(SYS_clone3, &args, sizeof args);
    if (pid == 0) ChildExec(image, workdir.string(), out[1], null_fd, err[1], parent);
    const int clone_errno = errno;
    close(out[1]), close(err[1]);
    if (null_fd >= 0) close(null_fd);
    if (pid < 0) {
      close(out[0]), close(err[0]);
      return SpawnFailed(result, std::string("clone3: ") + std::strerror(clone_errno), done);
    }
    int exec_errno = 0;
    ssize_t n;
    do {
      n = read(err[0], &exec_errno, sizeof exec_errno);
    } while (n < 0 && errno == EINTR);
    close(err[0]);
    auto r = std::make_shared<Running>(io, pidfd, out[0]);
    r->name = name;
    r->pid = static_cast<pid_t>(pid);
    r->started = steady_clock::now();
    r->timeout = timeout;
    r->done = std::move(done);
    running[name] = r;
    setpgid(r->pid, r->pid);  // also here: a kill(-pid) must not race the child's own setpgid
    if (n == sizeof exec_errno) {
      r->exec_error = "cannot execute " + exe->string() + ": " + std::strerror(exec_errno);
      r->output_closed = true;  // nothing ran; reap it and report
      r->output.close();
      WaitExit(r);
      return;
    }
    Log(LogLevel::kInfo, "event=hook_started hook=" + name + " pid=" + std::to_string(pid) +
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
    WaitExit(r);
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

  void WaitExit(const std::shared_ptr<Running>& r) {
    r->pid_stream.async_wait(asio::posix::stream_descriptor::wait_read, [this, r](const boost::system::error_code& ec) {
      if (ec == asio::error::operation_aborted) return;
      int rc;
      do {
        rc = waitid(static_cast<idtype_t>(P_PIDFD), static_cast<id_t>(r->pid_stream.native_handle()), &r->info,
                    WEXITED | __WALL);
      } while (rc != 0 && errno == EINTR);
      r->exited = true;
      r->timer.cancel();
      kill(-r->pid, SIGKILL);  // leftovers of the hook's group do not outlive it
      if (!r->output_closed) {
        r->timer.expires_after(kDrainAfterExit);  // a process that left the group may hold the pipe
        r->timer.async_wait([r](const boost::system::error_code& e) {
          if (!e) r->output.close();
        });
      }
      MaybeDone(r);
    });
  }

  void MaybeDone(const std::shared_ptr<Running>& r) {
    if (!r->exited || !r->output_closed) return;
    r->timer.cancel();
    r->pid_stream.close();
    HookResult result;
    result.hook = r->name;
    result.duration = std::chrono::duration_cast<Duration>(steady_clock::now() - r->started);
    if (!r->exec_error.empty()) {
      result.outcome = "spawn-failed";
      result.message = r->exec_error;
    } else if (r->info.si_code == CLD_EXITED) {
      result.exit_code = r->info.si_status;
      result.outcome = r->info.si_status == 0 ? "ok" : "failed";
      result.message = "exit code " + std::to_string(r->info.si_status);
    } else {
      result.signal = r->info.si_status;
      result.outcome = r->timed_out ? "timeout" : "failed";
      result.message = r->timed_out ? "killed after its " + FormatDuration(r->timeout) + " timeout"
                                    : "killed by " + config::SignalName(r->info.si_status);
    }
    const LogLevel level = result.outcome == "ok" ? LogLevel::kInfo : LogLevel::kError;
    Log(level, std::string(result.outcome == "ok" ? "event=hook_finished" : "event=hook_failed") + " hook=" + r->name +
                   " outcome=" + result.outcome + " status=" + Quote(result.message) +
                   " duration_ms=" + std::to_string(result.duration.count()));
    running.erase(r->name);
    r->done(result);
  }

  asio::io_context& io;
  std::filesystem::path workdir;                               // where hooks start
  std::map<std::string, std::string> env;                      // added to our environment
  std::map<std::string, std::shared_ptr<Running>> running;     // by hook name
};

HookRunner::HookRunner(asio::io_context& io, std::filesystem::path workdir, std::map<std::string, std::string> env)
    : impl_(std::make_unique<Impl>(io, std::move(workdir), std::move(env))) {}
HookRunner::~HookRunner() { KillAll(); }

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

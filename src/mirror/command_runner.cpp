// The relay-spawned mirror command; see command_runner.hpp. Between fork and exec only
// async-signal-safe calls are made: everything is prepared before the fork.
#include "spotvisor/mirror/command_runner.hpp"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>

#include "spotvisor/process/spawn.hpp"

extern char** environ;

namespace spotvisor::mirror {
namespace {

constexpr int kPollMs = 100;

void DefaultSignals() {
  struct sigaction dfl {};
  dfl.sa_handler = SIG_DFL;
  for (int s = 1; s < NSIG; ++s) {
    if (s != SIGKILL && s != SIGSTOP) sigaction(s, &dfl, nullptr);
  }
  sigset_t empty;
  sigemptyset(&empty);
  sigprocmask(SIG_SETMASK, &empty, nullptr);
}

// The relay: starts the command, reports its pid, waits, reports its status, exits.
[[noreturn]] void Relay(const char* path, char* const* argv, const char* workdir, int report_fd) {
  DefaultSignals();
  const pid_t pid = fork();
  if (pid == 0) {
    setpgid(0, 0);
    close(report_fd);
    if (chdir(workdir) == 0) execve(path, argv, environ);
    _exit(127);
  }
  if (pid < 0) _exit(126);
  setpgid(pid, pid);
  int words[2] = {static_cast<int>(pid), 0};
  [[maybe_unused]] ssize_t n = write(report_fd, &words[0], sizeof(int));
  int status = 0;
  while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  words[1] = status;
  n = write(report_fd, &words[1], sizeof(int));
  _exit(0);
}

// Reads exactly one int, waiting in slices so that the deadline and `cancelled` are seen.
// Returns 1 when read, 0 at end of file, -1 when the deadline passed or on cancel.
int ReadInt(int fd, int& value, std::chrono::steady_clock::time_point deadline, const std::function<bool()>& cancelled) {
  for (;;) {
    if (std::chrono::steady_clock::now() >= deadline || (cancelled && cancelled())) return -1;
    pollfd p{fd, POLLIN, 0};
    const int r = poll(&p, 1, kPollMs);
    if (r < 0 && errno != EINTR) return 0;
    if (r <= 0) continue;
    const ssize_t n = read(fd, &value, sizeof value);
    if (n < 0 && errno == EINTR) continue;
    return n == static_cast<ssize_t>(sizeof value) ? 1 : 0;
  }
}

}  // namespace

std::string CommandOutcome::Describe() const {
  if (timed_out) return "timed out (killed)";
  if (signal != 0) return "killed by signal " + std::to_string(signal);
  return "exit code " + std::to_string(exit_code);
}

Result<CommandOutcome> RunCommand(const std::vector<std::string>& argv, const std::filesystem::path& workdir,
                                  Duration timeout, const std::function<bool()>& cancelled) {
  if (argv.empty()) return Error{"the mirror command is empty"};
  auto exe = process::ResolveExecutable(argv.front(), workdir);
  if (!exe) return exe.error();
  std::vector<std::string> args = argv;
  std::vector<char*> pointers;
  for (auto& a : args) pointers.push_back(a.data());
  pointers.push_back(nullptr);
  const std::string path = exe->string();
  const std::string dir = workdir.string();

  int fds[2];
  if (pipe2(fds, O_CLOEXEC) != 0) return Error{std::string("cannot create a pipe: ") + std::strerror(errno)};
  const pid_t relay = fork();
  if (relay < 0) {
    close(fds[0]);
    close(fds[1]);
    return Error{std::string("cannot fork for ") + argv.front() + ": " + std::strerror(errno)};
  }
  if (relay == 0) {
    close(fds[0]);
    Relay(path.c_str(), pointers.data(), dir.c_str(), fds[1]);
  }
  close(fds[1]);
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  CommandOutcome outcome;
  int pid = 0;
  if (ReadInt(fds[0], pid, std::chrono::steady_clock::now() + std::chrono::seconds(10), {}) != 1) {
    close(fds[0]);
    return Error{"cannot start " + argv.front() + " (the relay process failed)"};
  }
  int status = 0;
  int got = ReadInt(fds[0], status, deadline, cancelled);
  if (got == -1) {
    outcome.timed_out = true;
    kill(-pid, SIGKILL);
    got = ReadInt(fds[0], status, std::chrono::steady_clock::now() + std::chrono::seconds(10), {});
  }
  close(fds[0]);
  if (got != 1) {
    if (!outcome.timed_out) return Error{"lost track of " + argv.front() + " (its relay process died)"};
    return outcome;
  }
  if (!outcome.timed_out) {
    if (WIFSIGNALED(status)) outcome.signal = WTERMSIG(status);
    else outcome.exit_code = WEXITSTATUS(status);
  }
  return outcome;
}

}  // namespace spotvisor::mirror

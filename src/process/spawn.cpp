// fork + exec with everything prepared before the fork, so the child only makes
// async-signal-safe calls. The child becomes its own process group leader (set on both
// sides of the fork to avoid the race), asks for SIGKILL when its parent dies (unless told
// not to), restores default signal dispositions and an empty mask, then execs.
#include "spotvisor/process/spawn.hpp"

#include <fcntl.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <initializer_list>
#include <vector>

#include "spotvisor/command/command_line.hpp"

extern char** environ;

namespace spotvisor::process {
namespace {

std::vector<std::string> BuildEnvironment(const std::map<std::string, std::string>& extra) {
  std::map<std::string, std::string> merged;
  for (char** e = environ; e && *e; ++e) {
    const std::string kv = *e;
    const auto eq = kv.find('=');
    if (eq != std::string::npos) merged[kv.substr(0, eq)] = kv.substr(eq + 1);
  }
  for (const auto& [k, v] : extra) merged[k] = v;
  std::vector<std::string> out;
  out.reserve(merged.size());
  for (const auto& [k, v] : merged) out.push_back(k + "=" + v);
  return out;
}

std::vector<char*> Pointers(std::vector<std::string>& strings) {
  std::vector<char*> out;
  out.reserve(strings.size() + 1);
  for (auto& s : strings) out.push_back(s.data());
  out.push_back(nullptr);
  return out;
}

// Runs in the child between fork and exec: async-signal-safe calls only.
// Closes those of `fds` that are open (>= 0).
void CloseAll(std::initializer_list<int> fds) {
  for (const int fd : fds) {
    if (fd >= 0) close(fd);
  }
}

// The child's ends of its standard streams; -1 keeps ours.
struct ChildFds {
  int in = -1, out = -1, err = -1;
};

[[noreturn]] void ExecChild(pid_t parent, bool die_with_parent, const char* path, char* const* argv, char* const* envp,
                            const char* workdir, int error_fd, ChildFds fds) {
  setpgid(0, 0);
  if (fds.in >= 0) dup2(fds.in, STDIN_FILENO);  // dup2 clears close-on-exec on 0, 1 and 2
  if (fds.out >= 0) dup2(fds.out, STDOUT_FILENO);
  if (fds.err >= 0) dup2(fds.err, STDERR_FILENO);
  if (die_with_parent) {
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (getppid() != parent) _exit(127);  // the supervisor died before PDEATHSIG was armed
  }
  struct sigaction dfl {};
  dfl.sa_handler = SIG_DFL;
  for (int s = 1; s < NSIG; ++s) {
    if (s != SIGKILL && s != SIGSTOP) sigaction(s, &dfl, nullptr);
  }
  sigset_t empty;
  sigemptyset(&empty);
  sigprocmask(SIG_SETMASK, &empty, nullptr);
#ifdef SYS_close_range
  syscall(SYS_close_range, 3u, ~0u, 4u /* CLOSE_RANGE_CLOEXEC */);
#endif
  int err = 0;
  if (chdir(workdir) != 0) {
    err = errno;
  } else {
    execve(path, argv, envp);
    err = errno;
  }
  [[maybe_unused]] ssize_t n = write(error_fd, &err, sizeof err);
  _exit(127);
}

// What the child's standard streams become, opened before the fork.
struct Streams {
  ChildFds child;                    // the child's 0, 1 and 2 (-1: ours)
  std::vector<int> child_side;       // closed in the parent once the child has its copies
  int out_read = -1, err_read = -1;  // pipe_output's read ends, for the caller

  void CloseChildSide() {
    for (const int fd : child_side) close(fd);
    child_side.clear();
  }
  void CloseAll() {
    CloseChildSide();
    spotvisor::process::CloseAll({out_read, err_read});
  }
};

// The output pipes (pipe_output) or the output file, and /dev/null for stdin.
Result<Streams> OpenStreams(const SpawnSpec& spec) {
  Streams s;
  if (spec.pipe_output) {
    int out[2] = {-1, -1}, err[2] = {-1, -1};
    if (pipe2(out, O_CLOEXEC) != 0 || (!spec.merge_output && pipe2(err, O_CLOEXEC) != 0)) {
      const int e = errno;
      CloseAll({out[0], out[1], err[0], err[1]});
      return Error{std::string("cannot make the output pipes: ") + std::strerror(e)};
    }
    s.out_read = out[0];
    s.err_read = err[0];
    s.child_side = {out[1]};
    if (err[1] >= 0) s.child_side.push_back(err[1]);
    s.child.out = out[1];
    s.child.err = spec.merge_output ? out[1] : err[1];
  } else if (!spec.output_file.empty()) {
    const int fd = open(spec.output_file.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
    if (fd < 0) {
      return Error{"cannot open " + spec.output_file.string() + " for the output of '" + spec.argv[0] +
                   "': " + std::strerror(errno)};
    }
    s.child_side = {fd};
    s.child.out = s.child.err = fd;
  }
  if (spec.null_stdin) {
    s.child.in = open("/dev/null", O_RDONLY | O_CLOEXEC);
    if (s.child.in >= 0) s.child_side.push_back(s.child.in);
  }
  return s;
}

// A pidfd for `pid` (close-on-exec), or -1 where the kernel has none.
int OpenPidfd(pid_t pid) {
#ifdef SYS_pidfd_open
  return static_cast<int>(syscall(SYS_pidfd_open, pid, 0));
#else
  (void)pid;
  return -1;
#endif
}

// exec's errno as the child wrote it before exiting, or 0 once the pipe closed on exec.
int ReadExecError(int fd) {
  int child_errno = 0;
  ssize_t n;
  do {
    n = read(fd, &child_errno, sizeof child_errno);
  } while (n < 0 && errno == EINTR);
  close(fd);
  return n == static_cast<ssize_t>(sizeof child_errno) ? child_errno : 0;
}

}  // namespace

Result<SpawnedChild> Spawn(const SpawnSpec& spec) {
  auto exe = command::ResolveExecutable(spec.argv.empty() ? "" : spec.argv[0], spec.workdir);
  if (!exe) return exe.error();
  std::string path = exe->string();
  std::vector<std::string> argv_strings = spec.argv;
  std::vector<std::string> env_strings = BuildEnvironment(spec.env);
  auto argv = Pointers(argv_strings);
  auto envp = Pointers(env_strings);
  const std::string workdir = spec.workdir.string();

  auto streams = OpenStreams(spec);
  if (!streams) return streams.error();
  int pipe_fds[2];
  if (pipe2(pipe_fds, O_CLOEXEC) != 0) {
    const int e = errno;
    streams->CloseAll();
    return Error{std::string("pipe2 failed: ") + std::strerror(e)};
  }
  const pid_t parent = getpid();
  // Signals stay blocked across the fork so that none reaches our handlers inside the
  // child before it has restored default dispositions; pending ones then act normally.
  sigset_t all, previous;
  sigfillset(&all);
  sigprocmask(SIG_BLOCK, &all, &previous);
  const pid_t pid = fork();
  if (pid != 0) sigprocmask(SIG_SETMASK, &previous, nullptr);
  if (pid < 0) {
    const int fork_errno = errno;
    CloseAll({pipe_fds[0], pipe_fds[1]});
    streams->CloseAll();
    return Error{"cannot start '" + spec.argv[0] + "': fork failed: " + std::strerror(fork_errno)};
  }
  if (pid == 0) {
    close(pipe_fds[0]);
    ExecChild(parent, spec.die_with_parent, path.c_str(), argv.data(), envp.data(), workdir.c_str(), pipe_fds[1],
              streams->child);
  }
  close(pipe_fds[1]);
  streams->CloseChildSide();
  setpgid(pid, pid);  // may fail with EACCES once the child has exec'd; it set it itself
  // Before anyone can reap it (the caller has not seen the pid yet), so the pid is this child.
  const int pidfd = spec.want_pidfd ? OpenPidfd(pid) : -1;
  if (const int child_errno = ReadExecError(pipe_fds[0]); child_errno != 0) {
    waitpid(pid, nullptr, 0);
    CloseAll({streams->out_read, streams->err_read, pidfd});
    return Error{"cannot start '" + spec.argv[0] + "' in " + workdir + ": " + std::strerror(child_errno)};
  }
  return SpawnedChild{pid, streams->out_read, streams->err_read, pidfd};
}

}  // namespace spotvisor::process

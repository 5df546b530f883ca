// The one way spotvisor runs a command (a hook, a mirror command, `scontrol requeue`, the
// drill's supervisors): argv (never a shell) started through the run's ChildTable in its
// own process group, its output lines optionally handed over, a deadline after which the
// whole group gets SIGKILL, cancellation, and one outcome once the group is gone and the
// output read. CommandRunner is asynchronous, on one io_context; blocking_command.hpp
// waits for one from a thread without a running io thread.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace boost::asio {
class io_context;
}  // namespace boost::asio

namespace spotvisor::process {

class ChildTable;

struct CommandSpec {
  std::vector<std::string> argv;           // argv[0] a path or a name looked up in PATH
  std::filesystem::path workdir = "/";     // must exist
  std::map<std::string, std::string> env;  // added to (and overriding) our environment
  std::chrono::milliseconds timeout{0};    // the deadline: then SIGKILL to the group (must be > 0)
  // Set: stdout and stderr go into one pipe and every line (without '\n', cut at 64 KiB)
  // comes here, on the runner's io thread. Empty: the output goes to `output_file`, or ours.
  std::function<void(std::string_view line)> on_line;
  std::filesystem::path output_file;  // without on_line: stdout and stderr appended to it
  bool null_stdin = true;             // stdin from /dev/null (else ours)
  bool die_with_parent = true;        // PDEATHSIG SIGKILL: gone with a SIGKILLed spotvisor
};

// How a command ended. kExited and kSignaled: on its own (a signal someone else sent);
// kTimedOut and kCancelled: we SIGKILLed its group (`signal` then says SIGKILL, or 0
// where its status never came); kSpawnFailed: it never ran (`error` says why).
enum class CommandEnd { kExited, kSignaled, kTimedOut, kCancelled, kSpawnFailed };

struct CommandOutcome {
  CommandEnd end = CommandEnd::kSpawnFailed;
  int exit_code = -1;                     // with kExited
  int signal = 0;                         // the signal that ended it (kSignaled, and after our SIGKILL)
  std::string error;                      // with kSpawnFailed: names the program and the reason
  std::string program;                    // argv[0]
  std::chrono::milliseconds timeout{0};   // the spec's, for Describe
  std::chrono::milliseconds duration{0};  // from the start to the group's end
  bool group_survived = false;            // some of its group outlived SIGKILL (D state) until we gave up

  bool ok() const { return end == CommandEnd::kExited && exit_code == 0; }
  // For people: "exit code 2", "killed by SIGTERM", "timed out after 5s (SIGKILL to its
  // process group)", "cancelled (SIGKILL to its process group)", or `error`.
  std::string Describe() const;
};

// Runs commands on one io_context (ninja's CommandRunner: one real runner; a fake can
// stand in for it). Start, Cancel and the callbacks: that io_context's thread. A command's
// exit is learnt from a pidfd and reaped through the ChildTable (harmless twice), so it
// needs no SIGCHLD handler and no other thread's reaping.
class CommandRunner {
 public:
  using Id = std::uint64_t;
  using Done = std::function<void(const CommandOutcome&)>;

  virtual ~CommandRunner() = default;

  // Starts `spec`; `done` runs once, on the io thread, never inside this call: once its
  // main process exited, the rest of its group got SIGKILL and is gone (reaped), and its
  // output read (a process that left the group holding the pipe: at most 2 s more).
  virtual Id Start(const CommandSpec& spec, Done done) = 0;

  // SIGKILL to the command's group; its `done` says kCancelled. Unknown or finished: nothing.
  virtual void Cancel(Id id) = 0;
  virtual void CancelAll() = 0;

  // Its main process while it runs (also its process group id); 0 once it exited, or
  // when it did not start.
  virtual pid_t pid(Id id) const = 0;

  virtual std::size_t running() const = 0;  // started, `done` not yet called
};

// The real runner: commands start through `children`; both outlive it. Destroying it
// SIGKILLs the groups still running and drops their callbacks (their statuses are reaped
// without a call).
std::unique_ptr<CommandRunner> MakeCommandRunner(boost::asio::io_context& io, ChildTable& children);

}  // namespace spotvisor::process

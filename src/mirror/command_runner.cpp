// The mirror command, started through the child table; see command_runner.hpp. The
// table's callback may come from any thread (the io thread's SIGCHLD, or this waiter's own
// Reap), so the status travels through a small mutex-guarded box.
#include "spotvisor/mirror/command_runner.hpp"

#include <signal.h>
#include <sys/wait.h>

#include <chrono>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <optional>

#include "spotvisor/process/child_table.hpp"

namespace spotvisor::mirror {
namespace {

using std::chrono::steady_clock;

constexpr auto kSlice = std::chrono::milliseconds(50);  // reaping and `cancelled` checks
constexpr auto kAfterKill = std::chrono::seconds(10);   // a SIGKILLed group's status

// Where the table's callback leaves the status for the waiting thread.
struct StatusBox {
  std::mutex mutex;
  std::condition_variable arrived;
  std::optional<int> status;
};

// The status, or nullopt once `deadline` passed or `cancelled` said so.
std::optional<int> Await(process::ChildTable& children, StatusBox& box, steady_clock::time_point deadline,
                         const std::function<bool()>& cancelled) {
  for (;;) {
    {
      std::unique_lock lock(box.mutex);
      box.arrived.wait_for(lock, std::min<steady_clock::duration>(kSlice, deadline - steady_clock::now()),
                           [&] { return box.status.has_value(); });
      if (box.status) return box.status;
    }
    if (steady_clock::now() >= deadline || (cancelled && cancelled())) return std::nullopt;
    children.Reap();  // outside the box's lock: Reap calls the callback, which takes it
  }
}

}  // namespace

std::string CommandOutcome::Describe() const {
  if (timed_out) return "timed out (killed)";
  if (signal != 0) return "killed by signal " + std::to_string(signal);
  return "exit code " + std::to_string(exit_code);
}

Result<CommandOutcome> RunCommand(process::ChildTable& children, const std::vector<std::string>& argv,
                                  const std::filesystem::path& workdir, Duration timeout,
                                  const std::function<bool()>& cancelled) {
  if (argv.empty()) return Error{"the mirror command is empty"};
  process::SpawnSpec spec;
  spec.argv = argv;
  spec.workdir = workdir;
  spec.die_with_parent = false;  // an upload in flight may finish after a SIGKILLed spotvisor
  auto box = std::make_shared<StatusBox>();
  auto child = children.Spawn(spec, [box](int wait_status) {
    {
      std::lock_guard lock(box->mutex);
      box->status = wait_status;
    }
    box->arrived.notify_all();
  });
  if (!child) return child.error();
  CommandOutcome outcome;
  auto status = Await(children, *box, steady_clock::now() + timeout, cancelled);
  if (!status) {
    outcome.timed_out = true;
    kill(-child->pid, SIGKILL);
    Await(children, *box, steady_clock::now() + kAfterKill, {});  // reaped, not left a zombie
    return outcome;
  }
  if (WIFSIGNALED(*status)) {
    outcome.signal = WTERMSIG(*status);
  } else {
    outcome.exit_code = WEXITSTATUS(*status);
  }
  return outcome;
}

}  // namespace spotvisor::mirror

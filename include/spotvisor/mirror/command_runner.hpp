// Runs a mirror command (`rclone copy ...`): argv, never a shell, in its own process group,
// with a time limit and cancellation, from a worker thread that blocks until it is done.
// It is started through the run's process::ChildTable, whose Reap hands its status to the
// waiting thread; the waiter also reaps every 50 ms itself, so it needs no running io
// thread (a drain at exit, a test). Any thread but the io thread.
#pragma once

#include <filesystem>
#include <functional>
#include <string>
#include <vector>

#include "spotvisor/util/result.hpp"
#include "spotvisor/util/units.hpp"

namespace spotvisor::process {
class ChildTable;
}  // namespace spotvisor::process

namespace spotvisor::mirror {

struct CommandOutcome {
  int exit_code = -1;      // valid when signal == 0 and !timed_out
  int signal = 0;          // the signal that ended it
  bool timed_out = false;  // killed (SIGKILL to its group) at the time limit or on cancel
  bool ok() const { return signal == 0 && !timed_out && exit_code == 0; }
  std::string Describe() const;  // "exit code 0", "killed by signal 9", "timed out"
};

// An Error when it could not be started at all (names the program and why).
Result<CommandOutcome> RunCommand(process::ChildTable& children, const std::vector<std::string>& argv,
                                  const std::filesystem::path& workdir, Duration timeout,
                                  const std::function<bool()>& cancelled = {});

}  // namespace spotvisor::mirror

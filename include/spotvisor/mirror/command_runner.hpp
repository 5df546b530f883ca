// Runs a mirror command (`rclone copy ...`): argv, never a shell, in its own process group,
// with a time limit and cancellation, from a worker thread. The supervisor reaps every
// child it has (it is a subreaper and waits for any pid), so the command is started by a
// short-lived relay process that waits for it and sends its pid and wait status back
// through a pipe: the status can never be reaped away from us.
#pragma once

#include <filesystem>
#include <functional>
#include <string>
#include <vector>

#include "spotvisor/util/result.hpp"
#include "spotvisor/util/units.hpp"

namespace spotvisor::mirror {

struct CommandOutcome {
  int exit_code = -1;      // valid when signal == 0 and !timed_out
  int signal = 0;          // the signal that ended it
  bool timed_out = false;  // killed (SIGKILL to its group) at the time limit or on cancel
  bool ok() const { return signal == 0 && !timed_out && exit_code == 0; }
  std::string Describe() const;  // "exit code 0", "killed by signal 9", "timed out"
};

// An Error when it could not be started at all (names the program and why).
Result<CommandOutcome> RunCommand(const std::vector<std::string>& argv, const std::filesystem::path& workdir,
                                  Duration timeout, const std::function<bool()>& cancelled = {});

}  // namespace spotvisor::mirror

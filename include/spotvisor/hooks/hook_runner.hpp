// Runs hooks through the one command runner (process/command.hpp: argv, never a shell,
// own process group, a timeout after which the whole group gets SIGKILL, started and
// reaped through the run's process::ChildTable, so a hook also finishes on an io_context
// that is not the driver's: before_start). This adds the hook's side: one run per hook
// name at a time, its output lines and its end in the log, and the HookResult. Everything
// runs on the io_context given; nothing blocks it. Destroying the runner SIGKILLs the
// hooks still running and drops their callbacks.
#pragma once

#include <sys/types.h>

#include <filesystem>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "spotvisor/util/units.hpp"

namespace boost::asio {
class io_context;
}  // namespace boost::asio

namespace spotvisor::process {
class ChildTable;
}  // namespace spotvisor::process

namespace spotvisor::hooks {

struct HookResult {
  std::string hook;              // before_start, on_checkpoint, on_notice, on_finish
  std::string outcome;           // ok | failed | timeout | spawn-failed
  std::optional<int> exit_code;  // when it exited
  std::optional<int> signal;     // when a signal ended it
  Duration duration{0};
  std::string message;  // for people: "exit code 2", "killed after 5s timeout"
};

class HookRunner {
 public:
  using Done = std::function<void(const HookResult&)>;
  // Hooks start in `workdir` with our environment plus `env`, through `children` (which
  // outlives the runner).
  HookRunner(boost::asio::io_context& io, process::ChildTable& children, std::filesystem::path workdir,
             std::map<std::string, std::string> env);
  ~HookRunner();  // SIGKILL to the running hooks' groups; their `done` is not called
  HookRunner(const HookRunner&) = delete;
  HookRunner& operator=(const HookRunner&) = delete;

  // Starts `argv` as hook `name` (extra environment `env` on top of the runner's); `done`
  // runs on the io thread once the hook's group is gone and its output read. A hook of
  // the same name still running: this one is skipped (done gets outcome "skipped").
  void Run(const std::string& name, const std::vector<std::string>& argv, Duration timeout,
           const std::map<std::string, std::string>& env, Done done);

  // SIGKILL to every running hook's group (shutdown); their `done` still runs.
  void KillAll();
  std::size_t running() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;  // keeps Asio out of this header
};

}  // namespace spotvisor::hooks

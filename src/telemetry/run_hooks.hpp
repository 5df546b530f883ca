// The job's hooks during a run (before_start, on_notice, on_checkpoint, on_finish): fills
// the placeholders ({job}, {attempt}, {checkpoint}, ...) and SPOTVISOR_* variables, runs
// the command through HookRunner and reports each result. io thread only, except that
// before_start runs to completion on a private loop before anything is supervised. Start
// times are the run clock's wall time.
#pragma once

#include <boost/asio/io_context.hpp>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>

#include "spotvisor/config/job_config.hpp"
#include "spotvisor/hooks/hook_runner.hpp"
#include "spotvisor/process/child_table.hpp"
#include "spotvisor/supervisor/fsm.hpp"
#include "spotvisor/util/clock.hpp"

namespace spotvisor::telemetry {

class RunHooks {
 public:
  // Gets every result (the run record keeps them), on the io thread.
  using Done = std::function<void(const std::string& name, const hooks::HookResult&, std::int64_t started_ms)>;
  // `job` and `clock` outlive the hooks.
  RunHooks(const config::JobConfig& job, Clock& clock, Done done);

  // Runs hooks.before_start and waits for it (bounded by its timeout). Before Start.
  void RunBeforeStart(int attempt, process::ChildTable& children);
  void Start(boost::asio::io_context& io, process::ChildTable& children);
  // The group place of the newest start: the hooks after it get {node_rank}, {nnodes},
  // {master_addr}, {master_port}, {epoch} and SPOTVISOR_NODE_RANK...; before it (before_start
  // runs before the group agrees) those are empty and unset.
  void SetPlace(const supervisor::GroupPlace& place) { place_ = place; }

  // Runs `spec` (nothing when its command is empty) with `extra` placeholders; `after`
  // runs once it finished, or at once when there is no hook.
  void Run(const std::string& name, const config::HookSpec& spec, int attempt, std::map<std::string, std::string> extra,
           std::function<void()> after = nullptr);

 private:
  void Launch(hooks::HookRunner& runner, const std::string& name, const config::HookSpec& spec, int attempt,
              std::map<std::string, std::string> extra, std::function<void()> after);

  const config::JobConfig& job_;                 // not owned
  Clock& clock_;                                 // not owned
  Done done_;                                    // io thread
  std::unique_ptr<hooks::HookRunner> runner_;    // from Start
  std::optional<supervisor::GroupPlace> place_;  // from SetPlace
};

}  // namespace spotvisor::telemetry

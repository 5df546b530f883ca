// Hooks during a run; see run_hooks.hpp.
#include "run_hooks.hpp"

#include "spotvisor/config/templates.hpp"
#include "spotvisor/log/log.hpp"
#include "spotvisor/supervisor/group_vars.hpp"

namespace spotvisor::telemetry {

using log::Log;
using log::LogLevel;
using log::Quote;

namespace asio = boost::asio;

RunHooks::RunHooks(const config::JobConfig& job, Clock& clock, Done done)
    : job_(job), clock_(clock), done_(std::move(done)) {}

// before_start must finish before the trainer starts (it restores data), and the
// observer seam cannot hold the start back, so it runs to completion here, on a private
// io_context: the only place we block the io thread, bounded by the hook's timeout,
// before anything is supervised.
void RunHooks::RunBeforeStart(int attempt, process::ChildTable& children) {
  if (job_.hooks.before_start.command.empty()) return;
  asio::io_context local;
  hooks::HookRunner runner(local, children, job_.job.workdir, job_.job.env);
  Launch(runner, "before_start", job_.hooks.before_start, attempt, {}, nullptr);
  local.run();
}

void RunHooks::Start(asio::io_context& io, process::ChildTable& children) {
  runner_ = std::make_unique<hooks::HookRunner>(io, children, job_.job.workdir, job_.job.env);
}

void RunHooks::Run(const std::string& name, const config::HookSpec& spec, int attempt,
                   std::map<std::string, std::string> extra, std::function<void()> after) {
  if (spec.command.empty() || !runner_) {
    if (after) after();
    return;
  }
  Launch(*runner_, name, spec, attempt, std::move(extra), std::move(after));
}

void RunHooks::Launch(hooks::HookRunner& runner, const std::string& name, const config::HookSpec& spec, int attempt,
                      std::map<std::string, std::string> extra, std::function<void()> after) {
  config::TemplateVars vars;
  for (const auto& placeholder : config::kHookTemplates) vars[placeholder] = "";
  vars["job"] = job_.job.name;
  vars["attempt"] = std::to_string(attempt);
  vars["checkpoint_dir"] = job_.checkpoints.dir ? job_.checkpoints.dir->string() : "";
  vars["result_file"] = job_.job.result_file ? job_.job.result_file->string() : "";
  vars["state_dir"] = job_.telemetry.state_dir.string();
  vars["hook"] = name;
  if (place_) {
    for (auto& [k, v] : supervisor::GroupVars(*place_)) vars[k] = v;
  }
  for (auto& [k, v] : extra) vars[k] = v;
  const auto started_ms = UnixMillis(clock_.WallNow());
  auto done = [this, name, started_ms, after](const hooks::HookResult& r) {
    done_(name, r, started_ms);
    if (after) after();
  };
  auto argv = config::ExpandArgv(spec.command, vars);
  if (!argv) {
    hooks::HookResult r{name, "spawn-failed", std::nullopt, std::nullopt, Duration(0), argv.error().message};
    Log(LogLevel::kError, "event=hook_failed hook=" + name + " outcome=spawn-failed error=" + Quote(r.message));
    done(r);
    return;
  }
  std::map<std::string, std::string> env{
      {"SPOTVISOR_HOOK", name}, {"SPOTVISOR_JOB", job_.job.name}, {"SPOTVISOR_STATE_DIR", vars["state_dir"]}};
  for (const auto& [key, var] :
       {std::pair{"SPOTVISOR_CHECKPOINT", "checkpoint"}, std::pair{"SPOTVISOR_STEP", "step"},
        std::pair{"SPOTVISOR_EXIT_CODE", "exit_code"}, std::pair{"SPOTVISOR_REPORT", "report"}}) {
    if (!vars[var].empty()) env[key] = vars[var];
  }
  if (place_) {
    for (auto& [k, v] : supervisor::GroupEnvironment(*place_)) env[k] = v;
  }
  runner.Run(name, *argv, spec.timeout, env, done);
}

}  // namespace spotvisor::telemetry

// Private to src/cli/: the flags every job-reading subcommand shares (`--config` and the
// overrides of job-file keys), and how they become an effective, finalized JobConfig.
#pragma once

#include <CLI/CLI.hpp>
#include <optional>
#include <string>
#include <vector>

#include "spotvisor/config/job_config.hpp"
#include "spotvisor/util/result.hpp"

namespace spotvisor::cli {

struct JobOptions {
  std::string config_file;  // --config
  std::optional<std::string> name, workdir, checkpoint_dir, pattern, state_dir, result_file;
  std::optional<std::string> grace, on_notice, checkpoint_signal, target;
  std::optional<std::string> provider, endpoint, poll_interval, validate;
  std::optional<std::string> log_format, log_level, metrics_listen, report_path, heartbeat_file, hang_timeout;
  std::optional<int> max_restarts, keep;
  bool no_mirror = false, no_hooks = false,
       no_metrics = false;                    // rehearsals (drill): leave the mirror, hooks, port alone
  std::vector<std::string> resume_args, env;  // repeatable
  std::vector<std::string> command;           // after --
};

// Registers --config and the overrides; `with_command` adds the trailing `-- COMMAND...`.
void AddJobOptions(CLI::App& app, JobOptions& options, bool with_command);

// Defaults, then the file (if any), then the flags, then Finalize. Errors name the file,
// line and key, or the flag.
Result<config::JobConfig> LoadJob(const JobOptions& options, bool require_command);

// Prints "spotvisor: configuration error: <message>" to stderr; returns exit code 78.
int ConfigError(const std::string& message);

// LoadJob; on an error, ConfigError sets `exit_code` and the result is empty.
std::optional<config::JobConfig> LoadJobOrExit(const JobOptions& options, bool require_command, int& exit_code);

}  // namespace spotvisor::cli

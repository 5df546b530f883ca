// Flag overrides of job-file keys; see job_options.hpp.
#include "job_options.hpp"

#include <cstdio>

#include "spotvisor/cli/app.hpp"
#include "spotvisor/config/loader.hpp"
#include "spotvisor/config/name_pattern.hpp"
#include "spotvisor/config/signals.hpp"

namespace spotvisor::cli {
namespace {

std::filesystem::path FromCwd(const std::string& p) {
  return std::filesystem::absolute(std::filesystem::path(p)).lexically_normal();
}

Error FlagError(const std::string& flag, const std::string& message) {
  return Error{"command line: " + flag + ": " + message};
}

// --grace, --on-notice, --checkpoint-signal, --signal-target.
Status ApplySignalOverrides(const JobOptions& o, config::SignalsSection& signals) {
  if (o.grace) {
    auto d = ParseDuration(*o.grace);
    if (!d) return FlagError("--grace", d.error().message);
    signals.grace = *d;
  }
  if (o.on_notice) {
    auto s = config::ParseSignal(*o.on_notice);
    if (!s) return FlagError("--on-notice", s.error().message);
    signals.on_notice = *s;
  }
  if (o.checkpoint_signal) {
    auto s = config::ParseSignal(*o.checkpoint_signal);
    if (!s) return FlagError("--checkpoint-signal", s.error().message);
    signals.checkpoint = *s;
  }
  if (o.target) {
    static const std::map<std::string, config::SignalTarget> targets{{"auto", config::SignalTarget::kAuto},
                                                                     {"group", config::SignalTarget::kGroup},
                                                                     {"main", config::SignalTarget::kMain},
                                                                     {"workers", config::SignalTarget::kWorkers}};
    const auto it = targets.find(*o.target);
    if (it == targets.end()) return FlagError("--signal-target", "expected auto, group, main or workers");
    signals.target = it->second;
  }
  return Ok{};
}

// --provider, --endpoint, --poll-interval.
Status ApplyProviderOverrides(const JobOptions& o, config::ProviderSection& provider) {
  if (o.provider) {
    static const std::map<std::string, config::ProviderKind> kinds{
        {"auto", config::ProviderKind::kAuto},       {"aws", config::ProviderKind::kAws},
        {"gcp", config::ProviderKind::kGcp},         {"azure", config::ProviderKind::kAzure},
        {"alibaba", config::ProviderKind::kAlibaba}, {"file", config::ProviderKind::kFile},
        {"none", config::ProviderKind::kNone}};
    const auto it = kinds.find(*o.provider);
    if (it == kinds.end())
      return FlagError("--provider",
                       "'" + *o.provider + "' is not one of auto | aws | gcp | azure | alibaba | file | none");
    provider.kind = it->second;
  }
  if (o.endpoint) provider.endpoint = *o.endpoint;
  if (o.poll_interval) {
    auto d = ParseDuration(*o.poll_interval);
    if (!d) return FlagError("--poll-interval", d.error().message);
    provider.poll_interval = *d;
  }
  return Ok{};
}

// Applies the flags that were given over `job`.
Status ApplyOverrides(const JobOptions& o, config::JobConfig& job) {
  if (o.name) job.job.name = *o.name;
  if (o.workdir) job.job.workdir = FromCwd(*o.workdir);
  if (o.checkpoint_dir) job.checkpoints.dir = FromCwd(*o.checkpoint_dir);
  if (o.pattern) {
    if (auto p = config::NamePattern::Parse(*o.pattern); !p) return FlagError("--pattern", p.error().message);
    job.checkpoints.pattern = *o.pattern;
  }
  if (o.state_dir) job.telemetry.state_dir = FromCwd(*o.state_dir);
  if (o.result_file) job.job.result_file = FromCwd(*o.result_file);
  if (!o.resume_args.empty()) job.job.resume_args = o.resume_args;
  for (const auto& kv : o.env) {
    const auto eq = kv.find('=');
    if (eq == std::string::npos || eq == 0) return FlagError("--env", "'" + kv + "' is not NAME=value");
    job.job.env[kv.substr(0, eq)] = kv.substr(eq + 1);
  }
  if (Status st = ApplySignalOverrides(o, job.signals); !st) return st;
  if (Status st = ApplyProviderOverrides(o, job.provider); !st) return st;
  if (o.validate) {
    if (*o.validate == "structure") job.checkpoints.validate = config::ValidateLevel::kStructure;
    else if (*o.validate == "format") job.checkpoints.validate = config::ValidateLevel::kFormat;
    else if (*o.validate == "full") job.checkpoints.validate = config::ValidateLevel::kFull;
    else return FlagError("--validate", "'" + *o.validate + "' is not one of structure | format | full");
  }
  if (o.log_format) {
    if (*o.log_format != "text" && *o.log_format != "json") return FlagError("--log-format", "expected text or json");
    job.telemetry.log_format = *o.log_format == "json" ? config::LogFormat::kJson : config::LogFormat::kText;
  }
  if (o.log_level) job.telemetry.log_level = *o.log_level;
  if (o.metrics_listen) job.telemetry.metrics.listen = *o.metrics_listen;
  if (o.no_metrics) job.telemetry.metrics.listen.clear();
  if (o.report_path) job.telemetry.report_path = FromCwd(*o.report_path);
  if (o.no_mirror) job.checkpoints.mirror = config::MirrorSection{};
  if (o.no_hooks) job.hooks = config::HooksSection{};
  if (o.heartbeat_file) job.health.heartbeat_file = FromCwd(*o.heartbeat_file);
  if (o.hang_timeout) {
    auto d = ParseDuration(*o.hang_timeout);
    if (!d) return FlagError("--hang-timeout", d.error().message);
    job.health.hang_timeout = *d;
  }
  if (o.max_restarts) job.restart.max_restarts = *o.max_restarts;
  if (o.keep) job.checkpoints.keep = *o.keep;
  if (!o.command.empty()) {
    job.job.command = o.command;
    job.key_lines.erase("job.command");
  }
  return Ok{};
}

}  // namespace

void AddJobOptions(CLI::App& app, JobOptions& o, bool with_command) {
  app.add_option("-c,--config", o.config_file, "The job file (YAML)");
  app.add_option("--name", o.name, "job.name");
  app.add_option("--workdir", o.workdir, "job.workdir");
  app.add_option("--checkpoint-dir", o.checkpoint_dir, "checkpoints.dir");
  app.add_option("--pattern", o.pattern, "checkpoints.pattern, e.g. 'ckpt_step{step}'");
  app.add_option("--resume-arg", o.resume_args, "job.resume_args (repeat for several arguments)");
  app.add_option("--result-file", o.result_file, "job.result_file");
  app.add_option("--env", o.env, "NAME=value added to job.env (repeatable)");
  app.add_option("--state-dir", o.state_dir, "telemetry.state_dir");
  app.add_option("--grace", o.grace, "signals.grace, e.g. 90s");
  app.add_option("--on-notice", o.on_notice, "signals.on_notice, e.g. SIGTERM");
  app.add_option("--checkpoint-signal", o.checkpoint_signal, "signals.checkpoint, e.g. SIGUSR1");
  app.add_option("--signal-target", o.target, "signals.target: auto | group | main | workers")
      ->check(CLI::IsMember({"auto", "group", "main", "workers"}));
  app.add_option("--provider", o.provider, "provider.kind: auto | aws | gcp | azure | alibaba | file | none")
      ->check(CLI::IsMember({"auto", "aws", "gcp", "azure", "alibaba", "file", "none"}));
  app.add_option("--endpoint", o.endpoint, "provider.endpoint, e.g. http://127.0.0.1:1338");
  app.add_option("--poll-interval", o.poll_interval, "provider.poll_interval, e.g. 1s");
  app.add_option("--validate", o.validate, "checkpoints.validate: structure | format | full")
      ->check(CLI::IsMember({"structure", "format", "full"}));
  app.add_option("--keep", o.keep, "checkpoints.keep");
  app.add_option("--max-restarts", o.max_restarts, "restart.max_restarts");
  app.add_option("--heartbeat-file", o.heartbeat_file, "health.heartbeat_file");
  app.add_option("--hang-timeout", o.hang_timeout, "health.hang_timeout, e.g. 10m");
  // Enumerated values are checked while parsing (a usage error, exit 64, naming the flag and
  // what it accepts): an unknown --log-level would otherwise turn logging off.
  app.add_option("--log-format", o.log_format, "telemetry.log_format: text | json")
      ->check(CLI::IsMember({"text", "json"}));
  app.add_option("--log-level", o.log_level, "telemetry.log_level: debug | info | warning | error | critical")
      ->check(CLI::IsMember({"debug", "info", "warning", "error", "critical"}));
  app.add_option("--metrics-listen", o.metrics_listen, "telemetry.metrics.listen, e.g. 127.0.0.1:9187");
  app.add_option("--report-path", o.report_path, "telemetry.report_path, e.g. ./report.md");
  app.add_flag("--no-mirror", o.no_mirror, "checkpoints.mirror off: no restore from it, no upload (rehearsals)");
  app.add_flag("--no-hooks", o.no_hooks, "hooks off: none of them runs (rehearsals)");
  app.add_flag("--no-metrics", o.no_metrics, "telemetry.metrics off: no port is opened (rehearsals)");
  if (with_command) app.add_option("command", o.command, "The training command, after --")->allow_extra_args();
}

Result<config::JobConfig> LoadJob(const JobOptions& o, bool require_command) {
  Result<config::JobConfig> job = config::DefaultConfig(std::filesystem::current_path());
  if (!o.config_file.empty()) job = config::LoadJobFile(o.config_file);
  if (!job) return job.error();
  if (Status s = ApplyOverrides(o, *job); !s) return s.error();
  if (!require_command && job->job.command.empty()) job->job.command = {"true"};
  if (Status s = config::Finalize(*job, /*need_command=*/require_command); !s) return s.error();
  return job;
}

int ConfigError(const std::string& message) {
  std::fprintf(stderr, "spotvisor: configuration error: %s\n", message.c_str());
  return exit_code::kConfig;
}

std::optional<config::JobConfig> LoadJobOrExit(const JobOptions& options, bool require_command, int& exit_code) {
  auto job = LoadJob(options, require_command);
  if (!job) {
    exit_code = ConfigError(job.error().message);
    return std::nullopt;
  }
  return std::move(*job);
}

}  // namespace spotvisor::cli

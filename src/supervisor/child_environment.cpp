// Argv and environment of one attempt; see child_environment.hpp.
#include "child_environment.hpp"

#include <cstdlib>

#include "spotvisor/supervisor/group_vars.hpp"

namespace spotvisor::supervisor {

config::TemplateVars AttemptVars(const config::JobConfig& job, const SpawnAction& attempt) {
  config::TemplateVars vars{{"attempt", std::to_string(attempt.attempt)}, {"job", job.job.name}};
  if (job.checkpoints.dir) vars["checkpoint_dir"] = job.checkpoints.dir->string();
  if (job.job.result_file) vars["result_file"] = job.job.result_file->string();
  vars.merge(GroupVars(attempt.place));
  if (attempt.resume) {
    vars["checkpoint"] = attempt.resume->path.string();
    vars["step"] = std::to_string(attempt.resume->step);
  }
  return vars;
}

std::filesystem::path NoticeFilePath(const config::JobConfig& job) { return job.telemetry.state_dir / "notice.json"; }

Result<process::SpawnSpec> BuildSpawnSpec(const config::JobConfig& job, const SpawnAction& attempt) {
  const auto vars = AttemptVars(job, attempt);
  auto argv = config::ExpandArgv(job.job.command, vars);
  if (!argv) return Error{"job.command: " + argv.error().message};
  if (attempt.resume) {
    auto extra = config::ExpandArgv(job.job.resume_args, vars);
    if (!extra) return Error{"job.resume_args: " + extra.error().message};
    argv->insert(argv->end(), extra->begin(), extra->end());
  }
  process::SpawnSpec spec;
  spec.argv = std::move(*argv);
  spec.workdir = job.job.workdir;
  spec.env = job.job.env;
  spec.pipe_output = !job.health.progress_pattern.empty();  // lines are read for the pulse
  spec.env["SPOTVISOR_ATTEMPT"] = std::to_string(attempt.attempt);
  spec.env["SPOTVISOR_RESTART_COUNT"] = std::to_string(attempt.restart_count);
  spec.env["SPOTVISOR_JOB"] = job.job.name;
  spec.env["SPOTVISOR_NOTICE_FILE"] = NoticeFilePath(job).string();
  spec.env["SPOTVISOR_CHECKPOINT_DIR"] = job.checkpoints.dir ? job.checkpoints.dir->string() : "";
  spec.env["SPOTVISOR_RESUME_FROM"] = attempt.resume ? attempt.resume->path.string() : "";
  spec.env["SPOTVISOR_RESUME_STEP"] = attempt.resume ? std::to_string(attempt.resume->step) : "";
  for (auto& [name, value] : GroupEnvironment(attempt.place)) spec.env[name] = value;
  // Python buffers stdout in blocks when it is not a terminal (our relay's pipe, an output
  // file, journald): a trainer killed by a signal would take its last lines with it. On a
  // terminal (line-buffered anyway) it changes nothing; job.env or our own environment
  // overrides it (PYTHONUNBUFFERED="" turns it off).
  if (!job.job.env.contains(kPythonUnbuffered) && std::getenv(kPythonUnbuffered) == nullptr) {
    spec.env[kPythonUnbuffered] = "1";
  }
  return spec;
}

}  // namespace spotvisor::supervisor

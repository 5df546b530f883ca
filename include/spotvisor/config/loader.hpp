// Reading a job: defaults, then the YAML job file, then command-line overrides, then
// checks and path resolution. Every error names the file, the line, the key and what was
// expected. Pure apart from reading the file; any thread.
#pragma once

#include <filesystem>
#include <string>

#include "spotvisor/config/job_config.hpp"
#include "spotvisor/util/result.hpp"

namespace spotvisor::config {

// Defaults for a job whose relative paths start at `base_dir`.
JobConfig DefaultConfig(const std::filesystem::path& base_dir);

// Reads `file` over the defaults. Unknown keys, wrong types, bad durations, sizes and
// signal names are errors. Relative paths start at the file's directory.
Result<JobConfig> LoadJobFile(const std::filesystem::path& file);

// The same from YAML text; `origin` names it in messages.
Result<JobConfig> LoadJobText(const std::string& yaml, const std::filesystem::path& origin,
                              const std::filesystem::path& base_dir);

// Checks what only the whole config can tell (a command exists, templates are used where
// they are allowed, paths resolve) and makes every path absolute. Run after overrides.
// `need_command` false (commands that only read: latest, checkpoints, validate, report,
// preflight) skips looking for job.command[0]: a restore script on a fresh VM has no trainer.
Status Finalize(JobConfig& job, bool need_command = true);

// The effective configuration as YAML, secrets redacted.
std::string ToYaml(const JobConfig& job);

}  // namespace spotvisor::config

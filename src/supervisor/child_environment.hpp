// Private to src/supervisor/: what one attempt of the trainer is started with — the
// command and resume arguments with templates filled per argument, and the SPOTVISOR_*
// environment of the child's side of the contract (MISSION.md). Pure but for one look at
// our own environment (PYTHONUNBUFFERED).
#pragma once

#include "spotvisor/config/job_config.hpp"
#include "spotvisor/config/templates.hpp"
#include "spotvisor/process/spawn.hpp"
#include "spotvisor/supervisor/fsm.hpp"

namespace spotvisor::supervisor {

// The template variables of an attempt ({checkpoint} and {step} only with a resume point).
config::TemplateVars AttemptVars(const config::JobConfig& job, const SpawnAction& attempt);

// Set to 1 for every trainer unless job.env or spotvisor's own environment has it.
inline constexpr const char* kPythonUnbuffered = "PYTHONUNBUFFERED";

Result<process::SpawnSpec> BuildSpawnSpec(const config::JobConfig& job, const SpawnAction& attempt);

// Where the notice file lives (SPOTVISOR_NOTICE_FILE).
std::filesystem::path NoticeFilePath(const config::JobConfig& job);

}  // namespace spotvisor::supervisor

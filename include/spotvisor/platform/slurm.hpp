// spotvisor inside a SLURM job: what the job's environment says (job id, restart count,
// the output file's open mode) and the observer that gets a stopped job requeued with
// `scontrol requeue`. Environment reads are pure given the map; the observer runs on the
// io thread and blocks at exit only (scontrol, bounded by kRequeueTimeout).
#pragma once

#include <map>
#include <memory>
#include <optional>
#include <string>

#include "spotvisor/config/job_config.hpp"
#include "spotvisor/supervisor/run_observer.hpp"

namespace spotvisor::platform {

struct SlurmJob {
  std::string job_id;                // SLURM_JOB_ID
  std::optional<int> restart_count;  // SLURM_RESTART_COUNT (unset before the first requeue)
  std::string open_mode;             // SLURM_OPEN_MODE: "a" with --open-mode=append, else ""
};

// Null outside SLURM (no SLURM_JOB_ID). `env` maps names to values.
std::optional<SlurmJob> SlurmJobFrom(const std::map<std::string, std::string>& env);
// The same, from this process's environment.
std::optional<SlurmJob> CurrentSlurmJob();

// Why the job's output would be lost on a requeue, or "" when it would not: stdout (fd 1)
// a regular file opened without O_APPEND, or (stdout not a file, e.g. under srun) no
// SLURM_OPEN_MODE=a. `stdout_append`: fd 1's O_APPEND when it is a regular file.
std::string TruncationWarning(const SlurmJob& job, std::optional<bool> stdout_append);

// Logs the SLURM job (id, restart count) at start and warns about truncation; after a
// resumable stop (job.stop_exit_code) caused by a signal or notice in slurm.requeue_on,
// runs `scontrol requeue <id>`. Null outside SLURM.
std::unique_ptr<supervisor::RunObserver> MakeSlurmObserver(const config::JobConfig& job);

}  // namespace spotvisor::platform

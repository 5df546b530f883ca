// Where `spotvisor run` is assembled: the one owner of checkpoints.dir (DirKeeper) with the
// resume selector and the checkpoint watcher on it, then the observers that need them —
// periodic/adaptive checkpoint requests, heartbeat hang detection, the mirror, telemetry —
// each only when the job's config asks for it, in the order they must be registered.
#pragma once

#include <memory>
#include <vector>

#include "spotvisor/checkpoint/resume_selector.hpp"
#include "spotvisor/config/job_config.hpp"
#include "spotvisor/supervisor/run_observer.hpp"
#include "spotvisor/util/result.hpp"

namespace spotvisor::cli {

struct RunParts {
  std::unique_ptr<checkpoint::ResumeSelector> selector;             // for the Driver; on the keeper
  std::vector<std::unique_ptr<supervisor::RunObserver>> observers;  // in registration order
};

// `job` must be finalized and outlive the parts (and the driver they go to). An Error is a
// configuration error (exit 78), from the telemetry checks.
Result<RunParts> AssembleRun(const config::JobConfig& job);

}  // namespace spotvisor::cli

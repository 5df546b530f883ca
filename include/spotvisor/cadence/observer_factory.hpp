// The one place `spotvisor run` gets the observers of issue 6 from: the new-checkpoint
// feed, periodic/adaptive checkpoint requests, heartbeat hang detection and the mirror,
// each only when the job's config asks for it, in the order they must be registered.
#pragma once

#include <memory>
#include <vector>

#include "spotvisor/config/job_config.hpp"
#include "spotvisor/supervisor/run_observer.hpp"

namespace spotvisor::cadence {

// `job` must be finalized and outlive the observers (and the driver they go to).
std::vector<std::unique_ptr<supervisor::RunObserver>> MakeCadenceHealthMirrorObservers(const config::JobConfig& job);

// "aws", "gcp", "azure", "alibaba", "file" or "none"; `auto` resolved from DMI.
std::string ProviderName(const config::JobConfig& job);

}  // namespace spotvisor::cadence

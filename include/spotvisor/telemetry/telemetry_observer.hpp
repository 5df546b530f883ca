// Everything that watches a run for people and tools, as RunObservers: the run record
// (run.json) and report, metrics endpoint, sd_notify and watchdog, GPU sampling, cost and
// budget, hooks. `spotvisor run` registers what MakeTelemetryObservers returns.
#pragma once

#include <memory>
#include <vector>

#include "spotvisor/config/job_config.hpp"
#include "spotvisor/supervisor/run_observer.hpp"
#include "spotvisor/util/result.hpp"

namespace spotvisor::checkpoint_watch {
class CheckpointWatcher;
}  // namespace spotvisor::checkpoint_watch

namespace spotvisor::mirror {
class MirrorObserver;
}  // namespace spotvisor::mirror

namespace spotvisor::telemetry {

// Checks what can be checked before the run (metrics address and token file, hook
// commands) and builds the observers. An Error is a configuration error (exit 78); its
// message names the key and the file, never a secret. Reads and clears NOTIFY_SOCKET,
// WATCHDOG_USEC and WATCHDOG_PID (the trainer must not talk to systemd in our name).
// New checkpoints come from `watcher` (null: no checkpoints.dir), which must outlive them;
// finished uploads from `mirror` (null: no mirror), subscribed to here before its OnStart.
Result<std::vector<std::unique_ptr<supervisor::RunObserver>>> MakeTelemetryObservers(
    const config::JobConfig& job, checkpoint_watch::CheckpointWatcher* watcher,
    mirror::MirrorObserver* mirror = nullptr);

}  // namespace spotvisor::telemetry

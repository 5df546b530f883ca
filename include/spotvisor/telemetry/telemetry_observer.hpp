// Everything that watches a run for people and tools, as RunObservers: the run record
// (run.json), metrics endpoint, sd_notify and watchdog, GPU sampling, cost and budget,
// hooks, and the report at the end (written by the function `spotvisor run` passes in, the
// report room's). `spotvisor run` registers what MakeTelemetryObservers returns.
#pragma once

#include <cstdint>
#include <filesystem>
#include <functional>
#include <memory>
#include <optional>
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

// Writes the run's report at its end, after run.json's last save: from the job's state dir,
// as at `now_ms` (unix ms of the run's clock). Returns the report's path, nullopt when none
// was written (it logs why). io thread, blocking.
using ReportWriter =
    std::function<std::optional<std::filesystem::path>(const config::JobConfig& job, std::int64_t now_ms)>;

// Checks what can be checked before the run (metrics address and token file, hook
// commands) and builds the observers. An Error is a configuration error (exit 78); its
// message names the key and the file, never a secret. Reads and clears NOTIFY_SOCKET,
// WATCHDOG_USEC and WATCHDOG_PID (the trainer must not talk to systemd in our name).
// New checkpoints come from `watcher` (null: no checkpoints.dir), which must outlive them;
// finished uploads from `mirror` (null: no mirror), subscribed to here before its OnStart.
// `write_report` writes the report at OnExit (empty: no report; on_finish's SPOTVISOR_REPORT
// is then empty).
Result<std::vector<std::unique_ptr<supervisor::RunObserver>>> MakeTelemetryObservers(
    const config::JobConfig& job, checkpoint_watch::CheckpointWatcher* watcher, mirror::MirrorObserver* mirror,
    ReportWriter write_report);

}  // namespace spotvisor::telemetry

// Assembles `spotvisor run`; see run_observers.hpp. The watcher is registered first: it
// exists before its subscribers and its baseline scan is queued on the keeper before the
// first selection.
#include "run_observers.hpp"

#include "spotvisor/cadence/cadence_observer.hpp"
#include "spotvisor/checkpoint_watch/checkpoint_watcher.hpp"
#include "spotvisor/checkpoint_watch/dir_keeper.hpp"
#include "spotvisor/health/heartbeat_monitor.hpp"
#include "spotvisor/mirror/mirror_observer.hpp"
#include "spotvisor/report/report.hpp"
#include "spotvisor/telemetry/telemetry_observer.hpp"

namespace spotvisor::cli {
namespace {

// Hands the watcher's new good checkpoints to the run's Fsm (RunControl::CheckpointLanded):
// a stop deferred for a trainer that cannot save on a signal waits for the next one (and
// pauses the trainer while one is judged: RunControl::CheckpointArriving); and the
// checkpoints it sees being written (RunControl::CheckpointWriting): such a stop whose time
// comes during a write waits for it where the deadline leaves room.
class LandedCheckpoints final : public supervisor::RunObserver {
 public:
  explicit LandedCheckpoints(checkpoint_watch::CheckpointWatcher& watcher) {
    watcher.Subscribe([this](const std::vector<checkpoint_watch::CheckpointVerdict>& verdicts) {
      for (const auto& v : verdicts) {
        if (v.good && control_) control_->CheckpointLanded(v.path, v.step, v.written_at);
      }
    });
    watcher.SubscribeWrites([this](const std::vector<std::filesystem::path>& writing) {
      if (control_) control_->CheckpointWriting(writing.front());
    });
    watcher.SubscribeArrivals([this](const std::filesystem::path& path, std::chrono::system_clock::time_point at) {
      if (control_) control_->CheckpointArriving(path, at);
    });
  }
  void OnStart(supervisor::RunControl& control) override { control_ = &control; }

 private:
  supervisor::RunControl* control_ = nullptr;  // the run's, from OnStart
};

}  // namespace

Result<RunParts> AssembleRun(const config::JobConfig& job) {
  RunParts parts;
  checkpoint_watch::CheckpointWatcher* watcher = nullptr;
  if (job.checkpoints.dir) {
    // The clock of PosixHost, which runs `spotvisor run`.
    auto keeper = std::make_shared<checkpoint_watch::DirKeeper>(job, SystemClock());
    parts.selector = checkpoint_watch::MakeKeptSelector(keeper);
    auto owned = std::make_unique<checkpoint_watch::CheckpointWatcher>(std::move(keeper), SystemClock());
    watcher = owned.get();
    parts.observers.push_back(std::move(owned));
    parts.observers.push_back(std::make_unique<LandedCheckpoints>(*watcher));
  }
  cadence::CadenceObserver* cadence = nullptr;
  if (job.cadence.mode != config::CadenceMode::kOff) {
    auto owned = std::make_unique<cadence::CadenceObserver>(job, watcher, config::ToString(job.provider.kind));
    cadence = owned.get();
    parts.observers.push_back(std::move(owned));
  }
  if (job.health.heartbeat_file || !job.health.progress_pattern.empty()) {
    parts.observers.push_back(std::make_unique<health::HeartbeatMonitor>(job));
  }
  mirror::MirrorObserver* mirror = nullptr;
  if (watcher &&
      (job.checkpoints.mirror.path || job.checkpoints.mirror.remote || !job.checkpoints.mirror.command.empty())) {
    auto owned = std::make_unique<mirror::MirrorObserver>(job, *watcher);
    mirror = owned.get();
    parts.observers.push_back(std::move(owned));
    // The planner's verdict reaches the adaptive cadence (the upload counts in C when it does not fit).
    if (cadence) {
      mirror->SubscribeUploaded(
          [cadence](const mirror::MirrorItem&, const std::optional<mirror::DurabilityPlan>& plan) {
            if (plan) cadence->PostDurabilityPlan(plan->upload, plan->fits());
          });
    }
  }
  auto telemetry = telemetry::MakeTelemetryObservers(job, watcher, mirror, report::WriteRunReport);
  if (!telemetry) return telemetry.error();
  for (auto& observer : *telemetry) parts.observers.push_back(std::move(observer));
  return parts;
}

}  // namespace spotvisor::cli

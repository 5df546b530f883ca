// Builds the cadence, health and mirror observers; see observer_factory.hpp. The feed is
// registered first so that it exists before its listeners subscribe and start.
#include "spotvisor/cadence/observer_factory.hpp"

#include "spotvisor/cadence/cadence_observer.hpp"
#include "spotvisor/cadence/checkpoint_feed.hpp"
#include "spotvisor/health/heartbeat_monitor.hpp"
#include "spotvisor/mirror/mirror_observer.hpp"
#include "spotvisor/preemption/provider_detect.hpp"

namespace spotvisor::cadence {

std::string ProviderName(const config::JobConfig& job) {
  using config::ProviderKind;
  ProviderKind kind = job.provider.kind;
  if (kind == ProviderKind::kAuto) kind = preemption::DetectProvider(job.provider.dmi_root).kind;
  return kind == ProviderKind::kAuto ? "none" : config::ToString(kind);
}

std::vector<std::unique_ptr<supervisor::RunObserver>> MakeCadenceHealthMirrorObservers(const config::JobConfig& job) {
  std::vector<std::unique_ptr<supervisor::RunObserver>> out;
  const bool cadence = job.cadence.mode != config::CadenceMode::kOff;
  const bool mirror = job.checkpoints.dir && (job.checkpoints.mirror.path || !job.checkpoints.mirror.command.empty());
  CheckpointFeed* feed = nullptr;
  const bool retention = job.checkpoints.keep > 0;
  if (job.checkpoints.dir && (cadence || mirror || retention)) {
    auto owned = std::make_unique<CheckpointFeed>(job);
    feed = owned.get();
    out.push_back(std::move(owned));
  }
  if (cadence) out.push_back(std::make_unique<CadenceObserver>(job, feed, ProviderName(job)));
  if (job.health.heartbeat_file || !job.health.progress_pattern.empty()) {
    out.push_back(std::make_unique<health::HeartbeatMonitor>(job));
  }
  if (mirror) out.push_back(std::make_unique<mirror::MirrorObserver>(job, feed));
  return out;
}

}  // namespace spotvisor::cadence

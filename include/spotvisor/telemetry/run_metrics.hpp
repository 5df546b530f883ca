// The spotvisor_* metrics of a run, rendered from what the telemetry observer knows at the
// moment of a scrape. Pure; the caller's thread.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "spotvisor/mirror/durability_plan.hpp"
#include "spotvisor/telemetry/nvml.hpp"
#include "spotvisor/telemetry/run_ledger.hpp"
#include "spotvisor/telemetry/run_summary.hpp"

namespace spotvisor::telemetry {

struct LiveView {
  const RunLedger* ledger = nullptr;
  const RunSummary* summary = nullptr;
  std::string phase;                             // idle, selecting, running, ...
  std::optional<double> trainer_uptime_seconds;  // the current trainer, when one runs
  std::optional<double> last_notice_to_signal_seconds;
  std::optional<double> last_grace_used_seconds;  // stop signal to the trainer's end
  bool gpu_sampled = false;                       // NVML answered at least once
  std::vector<GpuSample> gpus;
  std::map<std::pair<std::string, std::string>, int> hook_runs;  // (hook, outcome) -> count
  std::int64_t now_ms = 0;
  int group_members = 1;  // members of the group now (1 on a single node)
  int group_nodes = 1;    // coordination.nodes
  // With a mirror: the newest checkpoint on it (step, unix ms it got there), the bytes of
  // the newest good checkpoint while it is not on the mirror, the planner's last verdict.
  bool mirrored = false;
  std::optional<std::pair<std::uint64_t, std::int64_t>> newest_durable;
  std::uint64_t bytes_not_durable = 0;
  std::optional<mirror::DurabilityPlan> durability;
};

std::string RenderRunMetrics(const LiveView& view);

// A Prometheus label name from a free-form key: [a-zA-Z_][a-zA-Z0-9_]*.
std::string LabelName(const std::string& key);

}  // namespace spotvisor::telemetry

// `spotvisor preflight --config job.yaml`: every check in order (disk space, write speed
// against the warning window, metadata endpoint, GPU), one line each. Blocking; the
// command's thread.
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

#include "spotvisor/config/job_config.hpp"
#include "spotvisor/preflight/checks.hpp"

namespace spotvisor::preflight {

struct PreflightOptions {
  std::uint64_t write_size = 256ull << 20;       // bytes of the write test
  std::optional<std::uint64_t> checkpoint_size;  // expected size; else the last one seen
  std::optional<double> assumed_rate;            // bytes/s instead of measuring (what-if, tests)
  std::optional<double> assumed_upload_rate;     // bytes/s to the mirror; else the last one measured
  bool probe_endpoint = true;                    // false: skip the network check
};

std::vector<CheckLine> RunPreflight(const config::JobConfig& job, const PreflightOptions& options);

// The checkpoint size to plan for: the flag, else the last one in checkpoints.jsonl, else
// the newest checkpoint on disk; nullopt when none is known.
std::optional<SizeEstimate> EstimateCheckpointSize(const config::JobConfig& job, std::optional<std::uint64_t> flag);

}  // namespace spotvisor::preflight

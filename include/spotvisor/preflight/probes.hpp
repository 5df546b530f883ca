// The measurements behind `spotvisor preflight`: fsync'd sequential write throughput of a
// directory, the metadata endpoint (reachable, and what it says now), the GPU through
// NVML. Blocking, bounded by deadlines; the command's thread only.
#pragma once

#include <cstdint>
#include <filesystem>

#include "spotvisor/config/job_config.hpp"
#include "spotvisor/preflight/checks.hpp"
#include "spotvisor/util/result.hpp"

namespace spotvisor::preflight {

struct WriteMeasurement {
  double bytes_per_second = 0;
  std::uint64_t bytes = 0;  // written (and fsynced) in the test
};

// Writes `bytes` to a temp file in `dir` in 4 MiB chunks, fsyncs, deletes it; the rate
// includes the fsync. The Error names the file and the failing step (e.g. no space).
Result<WriteMeasurement> MeasureWriteThroughput(const std::filesystem::path& dir, std::uint64_t bytes);

// One request to the provider's "is there a notice" path (with its token dance), a 3 s
// deadline; `provider` as from preemption::ProviderName.
CheckLine ProbeEndpoint(const config::JobConfig& job, const std::string& provider);

// NVML if present (model, memory, driver) through telemetry::Nvml; "none" otherwise.
CheckLine ProbeGpu();

}  // namespace spotvisor::preflight

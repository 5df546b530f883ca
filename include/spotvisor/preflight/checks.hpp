// `spotvisor preflight`: the verdict lines and the pure rules behind them — free space
// against (keep + 1) checkpoints, write time of a checkpoint against the provider's
// warning window — so that they are tested without a slow disk. Pure, any thread.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "spotvisor/config/job_config.hpp"
#include "spotvisor/mirror/durability_plan.hpp"
#include "spotvisor/util/units.hpp"

namespace spotvisor::preflight {

enum class CheckStatus { kOk, kWarn, kFail };

struct CheckLine {
  std::string name;  // disk, write, endpoint, gpu
  CheckStatus status = CheckStatus::kOk;
  std::string text;  // what was found, in words
};

// "ok    disk      ..." / "WARN  ..." / "FAIL  ...": one line, status first.
std::string FormatLine(const CheckLine& line);

// A checkpoint size and where it came from ("the last checkpoint", "--checkpoint-size").
struct SizeEstimate {
  std::uint64_t bytes = 0;
  std::string source;
};

// Free bytes against (keep + 1) × size (keep 0 = keep all: only 2 × size, with a warning).
CheckLine EvaluateDiskSpace(const std::string& dir, std::uint64_t free_bytes, int keep,
                            const std::optional<SizeEstimate>& size);

// `bytes_per_second` measured (or assumed) in the checkpoint dir; the time to write one
// checkpoint against what the trainer gets: min(window − safety margin, signals.grace).
// Over that: fail; over half of it: warn.
CheckLine EvaluateWriteSpeed(double bytes_per_second, const std::optional<SizeEstimate>& size,
                             const std::string& provider, const config::JobConfig& job, const std::string& measured);

// Whether a checkpoint saved on a notice reaches the mirror inside the provider's warning
// window: the planner's verdict (mirror/durability_plan.hpp) at `bytes_per_second`
// (`rate_source` says where it came from; nullopt: none known). Does not fit: fail, with
// what would fix it; under a quarter of the window to spare: warn.
CheckLine EvaluateUpload(std::optional<double> bytes_per_second, const std::string& rate_source,
                         const std::optional<SizeEstimate>& size, std::optional<Duration> save,
                         const std::string& provider, const config::JobConfig& job);

}  // namespace spotvisor::preflight

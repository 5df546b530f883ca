// The preflight sequence; see preflight.hpp. The write test runs in checkpoints.dir, or
// the nearest existing directory above it (preflight creates nothing that stays).
#include "spotvisor/preflight/preflight.hpp"

#include <sys/statvfs.h>

#include "spotvisor/cadence/checkpoint_journal.hpp"
#include "spotvisor/checkpoint/catalog.hpp"
#include "spotvisor/mirror/durability_plan.hpp"
#include "spotvisor/preflight/probes.hpp"

namespace spotvisor::preflight {
namespace {

namespace fs = std::filesystem;

fs::path NearestExisting(fs::path p) {
  std::error_code ec;
  while (!p.empty() && !fs::is_directory(p, ec) && p != p.root_path()) p = p.parent_path();
  return p.empty() ? fs::current_path() : p;
}

}  // namespace

std::optional<SizeEstimate> EstimateCheckpointSize(const config::JobConfig& job, std::optional<std::uint64_t> flag) {
  if (flag) return SizeEstimate{*flag, "--checkpoint-size"};
  const auto records = cadence::ReadCheckpointRecords(job.telemetry.state_dir);
  for (auto it = records.rbegin(); it != records.rend(); ++it) {
    if (it->event == "checkpoint" && it->size_bytes) return SizeEstimate{*it->size_bytes, "the last checkpoint"};
  }
  if (!job.checkpoints.dir) return std::nullopt;
  auto catalog = checkpoint::Catalog::FromConfig(job);
  if (!catalog) return std::nullopt;
  auto entries = catalog->Scan();
  if (!entries) return std::nullopt;
  for (const auto& e : *entries) {
    if (e.scan_error.empty() && e.key.size > 0) return SizeEstimate{e.key.size, "the newest checkpoint, " + e.name};
  }
  return std::nullopt;
}

std::vector<CheckLine> RunPreflight(const config::JobConfig& job, const PreflightOptions& options) {
  std::vector<CheckLine> lines;
  const std::string provider = config::ToString(job.provider.kind);
  const fs::path dir = NearestExisting(job.checkpoints.dir ? *job.checkpoints.dir : job.job.workdir);
  const auto size = EstimateCheckpointSize(job, options.checkpoint_size);

  struct statvfs vfs {};
  std::uint64_t free_bytes = 0;
  if (::statvfs(dir.c_str(), &vfs) == 0) {
    free_bytes = static_cast<std::uint64_t>(vfs.f_bavail) * vfs.f_frsize;
    lines.push_back(EvaluateDiskSpace(dir.string(), free_bytes, job.checkpoints.keep, size));
  } else {
    lines.push_back({"disk", CheckStatus::kFail, "cannot statvfs " + dir.string()});
  }

  if (options.assumed_rate) {
    lines.push_back(EvaluateWriteSpeed(*options.assumed_rate, size, provider, job, "assumed, --assume-write-rate"));
  } else {
    // Never fill the disk to measure it: at most a quarter of the free space.
    const std::uint64_t bytes = std::max<std::uint64_t>(4096, std::min(options.write_size, free_bytes / 4));
    auto measured = MeasureWriteThroughput(dir, bytes);
    if (!measured) {
      lines.push_back({"write", CheckStatus::kFail, measured.error().message});
    } else {
      lines.push_back(EvaluateWriteSpeed(measured->bytes_per_second, size, provider, job,
                                         FormatSize(measured->bytes) + " written with fsync in " + dir.string()));
    }
  }
  const auto& m = job.checkpoints.mirror;
  if (options.assumed_upload_rate || m.path || m.remote || !m.command.empty()) {
    const auto measured = options.assumed_upload_rate ? std::nullopt : mirror::LoadUploadRate(job.telemetry.state_dir);
    const auto rate = options.assumed_upload_rate ? options.assumed_upload_rate : measured;
    const std::string source =
        options.assumed_upload_rate ? "assumed, --assume-upload-rate" : "the mirror's last upload";
    const auto save = mirror::LastSaveTime(cadence::ReadCheckpointRecords(job.telemetry.state_dir));
    lines.push_back(EvaluateUpload(rate, source, size, save, provider, job));
  }
  if (options.probe_endpoint) lines.push_back(ProbeEndpoint(job, provider));
  lines.push_back(ProbeGpu());
  return lines;
}

}  // namespace spotvisor::preflight

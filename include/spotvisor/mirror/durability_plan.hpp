// The planner: will the checkpoint saved for a notice reach durable storage before the VM
// is gone? From what spotvisor measures — the trainer's save time (request → good
// checkpoint, the cadence's records), the checkpoint's bytes and the mirror's upload rate
// (the last upload's, or one assumed by `preflight --assume-upload-rate`) — against the
// provider's warning window. Pure, any thread: the mirror logs it after each upload and
// preflight prints it. The last measured rate is kept in `<state_dir>/upload-rate.json` for
// preflight (the two I/O functions at the end: worker threads only).
#pragma once

#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include "spotvisor/cadence/checkpoint_journal.hpp"
#include "spotvisor/util/clock.hpp"
#include "spotvisor/util/result.hpp"

namespace spotvisor::mirror {

struct DurabilityPlan {
  Duration window{};             // the provider's warning window
  std::optional<Duration> save;  // the trainer's save; nullopt: not measured yet (counted as 0)
  std::uint64_t bytes = 0;       // one checkpoint
  double upload_rate = 0;        // bytes per second; 0: unknown (no verdict)
  Duration upload{};             // bytes / upload_rate
  Duration margin{};             // window − save − upload; negative: it does not fit

  bool fits() const { return margin >= Duration::zero(); }
  // "window_s=120 save_s=8.0 upload_s=95.2 margin_s=16.8 bytes=… upload_rate=…" for log lines.
  std::string Numbers() const;
  // What would make it fit: the upload rate it needs, the largest checkpoint that fits at
  // the measured rate, and that periodic checkpoints keep the newest durable one recent.
  std::string Advice() const;
};

// `upload_rate` > 0.
DurabilityPlan PlanDurability(Duration window, std::optional<Duration> save, std::uint64_t bytes, double upload_rate);

// The newest measured save time in the cadence's records (a checkpoint spotvisor asked for:
// request → good checkpoint); nullopt when none was measured.
std::optional<Duration> LastSaveTime(const std::vector<cadence::CheckpointRecord>& records);

// The mirror's last measured upload rate (bytes/s), kept across runs for preflight.
Status SaveUploadRate(const std::filesystem::path& state_dir, double bytes_per_second, WallTime measured_at);
std::optional<double> LoadUploadRate(const std::filesystem::path& state_dir);  // nullopt: none, or unreadable

}  // namespace spotvisor::mirror

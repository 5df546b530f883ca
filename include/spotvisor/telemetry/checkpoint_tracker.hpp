// Watches checkpoints.dir for new checkpoints while a run goes on: a name that matches the
// pattern and stayed unchanged for one scan is validated (the job's level) on the
// tracker's own thread, timed (statx birth to last modification) and reported on the io
// thread. Feeds the metrics, the report and the on_checkpoint hook. Owned by the
// telemetry observer; Start/ScanNow/Stop on the io thread.
#pragma once

#include <cstdint>
#include <filesystem>
#include <functional>
#include <memory>
#include <optional>
#include <set>
#include <string>

#include "spotvisor/config/job_config.hpp"
#include "spotvisor/telemetry/run_ledger.hpp"

namespace boost::asio {
class io_context;
}  // namespace boost::asio

namespace spotvisor::telemetry {

// Size, newest mtime and (when the filesystem keeps it) the oldest birth time of a
// checkpoint file or directory; nullopt when it cannot be read.
struct CheckpointShape {
  std::uint64_t bytes = 0;
  std::int64_t mtime_ms = 0;
  std::optional<std::int64_t> birth_ms;
  bool operator==(const CheckpointShape& o) const { return bytes == o.bytes && mtime_ms == o.mtime_ms; }
};
std::optional<CheckpointShape> MeasureCheckpoint(const std::filesystem::path& path);

class CheckpointTracker {
 public:
  // `on_new` gets each newly judged checkpoint (attempt left 0: the caller fills it).
  using OnNew = std::function<void(CheckpointRecord, std::filesystem::path)>;
  CheckpointTracker(boost::asio::io_context& io, const config::JobConfig& job, Duration interval, OnNew on_new);
  ~CheckpointTracker();  // waits for a validation in progress
  CheckpointTracker(const CheckpointTracker&) = delete;
  CheckpointTracker& operator=(const CheckpointTracker&) = delete;

  // Checkpoints present now (and names in `known`) are the baseline: never reported.
  void Start(std::set<std::string> known);
  void ScanNow();
  void Stop();

 private:
  struct Impl;
  std::shared_ptr<Impl> impl_;  // shared with work in flight on the tracker's thread
};

}  // namespace spotvisor::telemetry

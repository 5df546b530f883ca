// What a checkpoint looks like on disk without reading it: total size, newest mtime and
// (where the filesystem keeps it) the oldest birth time, from statx. The watcher measures
// each checkpoint it judges; telemetry turns birth → mtime into the write time. Any thread.
#pragma once

#include <cstdint>
#include <filesystem>
#include <optional>

namespace spotvisor::checkpoint_watch {

// Size, newest mtime and the oldest birth time of a checkpoint file or directory.
struct CheckpointShape {
  std::uint64_t bytes = 0;               // every regular file
  std::int64_t mtime_ms = 0;             // newest modification, Unix ms
  std::optional<std::int64_t> birth_ms;  // oldest birth, Unix ms; nullopt when a file lacks one
  bool operator==(const CheckpointShape& o) const { return bytes == o.bytes && mtime_ms == o.mtime_ms; }
};

// nullopt when it cannot be read. Never follows symlinks; at most 100000 files walked.
std::optional<CheckpointShape> MeasureCheckpoint(const std::filesystem::path& path);

}  // namespace spotvisor::checkpoint_watch

// Copying a checkpoint (one file or a directory tree) to another directory so that the
// target either has the whole, verified copy or nothing: every file is hashed (XXH3) while
// read, written and fsynced under a temp name (`.spotvisor-mirror-tmp-<name>`, which no
// catalog counts), read back and compared, then the tree is renamed into place and the
// parent fsynced. Bandwidth and cancellation come in through CopyControl. Blocking: a
// worker thread only.
#pragma once

#include <cstdint>
#include <filesystem>
#include <optional>
#include <stop_token>
#include <string>

#include "spotvisor/mirror/rate_limiter.hpp"
#include "spotvisor/util/result.hpp"

namespace spotvisor::mirror {

inline constexpr std::string_view kTempPrefix = ".spotvisor-mirror-tmp-";

struct CopyControl {
  RateLimiter* limiter = nullptr;  // null: no cap
  std::stop_token stop;            // checked between chunks (and ends a command): requested aborts
};

struct CopyStats {
  std::uint64_t bytes = 0;  // file bytes copied
  std::size_t files = 0;    // regular files copied
};

// Copies `source` to `target_dir / name` (replacing an existing entry of that name only
// once the new copy is complete). On any failure the temp copy is removed and the Error
// names the file and the step (read, write, fsync, verify, rename).
Result<CopyStats> CopyVerified(const std::filesystem::path& source, const std::filesystem::path& target_dir,
                               const std::string& name, const CopyControl& control);

// Total bytes of the regular files under `path` (or its size, for a file); nullopt when
// it cannot be read.
std::optional<std::uint64_t> TreeBytes(const std::filesystem::path& path);

// Removes leftovers of interrupted copies (temp names) in `dir`; returns how many.
int RemoveCopyLeftovers(const std::filesystem::path& dir);

}  // namespace spotvisor::mirror

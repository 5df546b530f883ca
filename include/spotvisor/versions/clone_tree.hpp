// Copying a checkpoint (one file or a directory tree) for the versions of a fixed-name
// checkpoint: each file by a reflink (ioctl FICLONE: shared blocks, no bytes moved) where
// the filesystem can, else by copy_file_range or read/write; modes and mtimes kept (a
// version's size and mtime identify the content it holds), every file and directory
// fsynced. Blocking: a worker thread (the checkpoints.dir keeper) or a command.
#pragma once

#include <cstdint>
#include <filesystem>
#include <functional>

#include "spotvisor/util/result.hpp"

namespace spotvisor::versions {

struct CloneStats {
  std::uint64_t bytes = 0;         // size of the regular files cloned or copied
  std::uint64_t copied_bytes = 0;  // of those, the bytes copied (not shared by a reflink)
  std::size_t files = 0;           // regular files
  bool reflinked() const { return copied_bytes == 0; }
};

// What CloneTree returns when `abandon` said yes: the partial copy is removed.
inline constexpr std::string_view kCloneAbandoned = "abandoned";

// Clones `from` to `to` (which must not exist). `abandon` is asked before each byte copy
// and between its chunks (never for a reflink, which moves no bytes): true stops, removes
// what was made, and returns an Error whose message starts with kCloneAbandoned. Any other
// Error names the file and the step (open, copy, fsync) and leaves nothing at `to`.
Result<CloneStats> CloneTree(const std::filesystem::path& from, const std::filesystem::path& to,
                             const std::function<bool()>& abandon);

}  // namespace spotvisor::versions

// Durable, atomic file replacement: write a temp file in the same directory, fsync it,
// rename it over the target, fsync the directory. Readers see the old or the new content,
// never a mix, even across a power cut. Any thread.
#pragma once

#include <filesystem>
#include <string_view>

#include "spotvisor/util/result.hpp"

namespace spotvisor {

enum class Durability {
  kDurable,     // fsync the file and the directory: survives a power cut
  kAtomicOnly,  // rename only: survives a crash of the process, cheap enough for hot paths
};

// The Error names the path and the failing step (a failed fsync means "not written").
Status WriteFileAtomically(const std::filesystem::path& path, std::string_view contents,
                           Durability durability = Durability::kDurable);

// Appends `line` (one or more lines, ending in '\n') to `path` with O_APPEND and fdatasyncs
// it: a journal line is either whole and durable or, after a power cut, a torn last line.
// A write that fails part-way (disk full) is cut back off, so a retry appends whole lines;
// a torn last line already there (power cut) is ended first, so it stays alone.
Status AppendLineDurably(const std::filesystem::path& path, std::string_view line);

// fsync of a directory, so that a rename or create inside it is durable.
Status SyncDirectory(const std::filesystem::path& dir);

}  // namespace spotvisor

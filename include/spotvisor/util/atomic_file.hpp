// Durable, atomic file replacement: write a temp file in the same directory, fsync it,
// rename it over the target, fsync the directory. Readers see the old or the new content,
// never a mix, even across a power cut. Any thread.
#pragma once

#include <filesystem>
#include <string_view>

#include "spotvisor/util/result.hpp"

namespace spotvisor {

// The Error names the path and the failing step (a failed fsync means "not written").
Status WriteFileAtomically(const std::filesystem::path& path, std::string_view contents);

// fsync of a directory, so that a rename or create inside it is durable.
Status SyncDirectory(const std::filesystem::path& dir);

}  // namespace spotvisor

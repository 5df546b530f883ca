// The optional `latest` symlink in checkpoints.dir, replaced atomically: a new link under
// a temp name, renamed over the old one, then the directory fsynced. Any thread.
#pragma once

#include <filesystem>

#include "spotvisor/util/result.hpp"

namespace spotvisor::checkpoint {

// Points `link` at `target` (stored as given, e.g. a bare checkpoint name).
Status ReplaceSymlinkAtomically(const std::filesystem::path& link, const std::filesystem::path& target);

}  // namespace spotvisor::checkpoint

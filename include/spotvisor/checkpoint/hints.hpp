// DeepSpeed's `latest` (a tag name) and Megatron's `latest_checkpointed_iteration.txt`
// (a step or "release") in the checkpoints dir: read as hints, never trusted, and — when
// the job asks — rewritten atomically to name the checkpoint spotvisor chose. Any thread.
#pragma once

#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include "spotvisor/util/result.hpp"

namespace spotvisor::checkpoint {

struct Hint {
  std::filesystem::path file;  // the pointer file
  std::string value;           // what it says, trimmed ("global_step100", "100")
  bool parses = true;          // false: empty or garbage (Megatron would refuse to start)
};

// The pointer files present in `dir`.
std::vector<Hint> ReadHints(const std::filesystem::path& dir);

// Rewrites each present pointer file to name `chosen_name` / `chosen_step`. Returns what
// was rewritten.
Result<std::vector<std::filesystem::path>> RewriteHints(const std::filesystem::path& dir,
                                                        const std::string& chosen_name, std::uint64_t chosen_step);

}  // namespace spotvisor::checkpoint

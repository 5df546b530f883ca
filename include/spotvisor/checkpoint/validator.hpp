// The verdict on one checkpoint (a file, or a directory of files) at a validation level:
// commit markers (configured marker, DCP .metadata, Orbax commit_success.txt), the
// spotvisor manifest, and every file by its own format. Reads only; any thread (uses the
// hash pool it is given).
#pragma once

#include <filesystem>
#include <optional>
#include <string>

#include "spotvisor/config/job_config.hpp"

namespace spotvisor::checkpoint {

class HashPool;

struct Verdict {
  bool good = false;
  std::string reason;  // bad: the first failure (file, entry, offset); good: a summary
  std::string format;  // "torch.save", "safetensors", "dcp", "hf", "orbax", "files", ...
};

struct ValidatorOptions {
  config::ValidateLevel level = config::ValidateLevel::kFull;
  std::string format = "auto";                                // checkpoints.format
  std::string marker;                                         // checkpoints.marker; empty = none
  config::ContentCheck content = config::ContentCheck::kOff;  // checkpoints.content
  // Symlinks must resolve inside this directory (checkpoints.dir); empty = no check.
  std::filesystem::path root;
  HashPool* pool = nullptr;
  // Processes that each write a share of one checkpoint (checkpoints.processes, or the
  // launcher's count): every share 0..processes-1 must be there. 0 = unknown: a share is
  // required only below the highest one present.
  int processes = 0;
  // Sealing: every file is checked by its own format too, and files an older manifest does
  // not list yet are allowed (the new one will); what it lists must still match it.
  bool for_seal = false;
};

// What checkpoints.* says: level, format, marker, content, processes (not root or pool).
ValidatorOptions ValidatorOptionsFor(const config::CheckpointsSection& c);

Verdict ValidateCheckpoint(const std::filesystem::path& path, const ValidatorOptions& options);

std::string_view LevelName(config::ValidateLevel level);
std::optional<config::ValidateLevel> ParseLevel(std::string_view text);

}  // namespace spotvisor::checkpoint

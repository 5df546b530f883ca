// How a drill decides "identical" — the job's result files byte for byte, or, without one,
// the tensor payloads of the newest checkpoints (torch.save data entries, those of every
// archive in a DCP shard, safetensors data sections; pickled metadata may legitimately
// differ), compared a block at a time (memory stays flat whatever the checkpoint's size) —
// and the pace figures of the verdict table. Pure reads of the scratch dirs.
#pragma once

#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>

namespace spotvisor::drill {

struct Comparison {
  bool identical = false;
  std::string explanation;  // what was compared and, when they differ, where
};

Comparison CompareResultFiles(const std::filesystem::path& a, const std::filesystem::path& b);
Comparison CompareNewestCheckpoints(const std::filesystem::path& dir_a, const std::filesystem::path& dir_b,
                                    const std::string& pattern);

// Steps per second of the uninterrupted run: its newest checkpoint's step over the
// trainer's run time from the journal; 0 when unknown.
double StepsPerSecond(const std::filesystem::path& ckpt_dir, const std::string& pattern,
                      const std::filesystem::path& state_dir);

// When a checkpoint was written (its mtime), unix ms.
std::optional<std::int64_t> CheckpointMillis(const std::filesystem::path& path);

}  // namespace spotvisor::drill

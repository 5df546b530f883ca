// Private to src/checkpoint/: whether a checkpoint directory is complete by the rules of
// the framework that wrote it in place — what it writes last is there, and every shard it
// writes for the world size it recorded. Hugging Face Trainer (trainer_state.json last),
// accelerate's save_state (random_states_0.pkl after the main process's models and optimizers),
// DeepSpeed (`latest` beside the tag directory, every model and ZeRO shard), Megatron-LM
// (the iteration tracker beside it, every mp_rank directory), PyTorch DCP (.metadata, and
// every item it records inside its shard), Orbax (commit_success.txt). Reads only.
#pragma once

#include <filesystem>
#include <set>
#include <string>
#include <vector>

#include "spotvisor/checkpoint/validator.hpp"
#include "spotvisor/util/result.hpp"

namespace spotvisor::checkpoint {

// Files beside a checkpoint directory, in its parent, that commit it: DeepSpeed's tag file
// and Megatron's iteration tracker.
inline constexpr const char* kMarkersBeside[] = {"latest", "latest_checkpointed_iteration.txt"};

struct CheckpointFile {
  std::string rel;             // '/'-separated, relative to the checkpoint
  std::filesystem::path path;  // what to open (a symlink's target when it stays inside)
};

struct LayoutVerdict {
  std::string by;                 // what commits it: "trainer_state.json", "latest", ... ("" none)
  std::string kind;               // "hf", "accelerate", "deepspeed", "megatron", "dcp", "orbax", "" (none)
  std::set<std::string> checked;  // files the layout checked in full (DCP shards by .metadata)
};

// `files` sorted by rel. `has_manifest`: a spotvisor manifest commits a directory whose
// framework marker lives outside it (DeepSpeed's `latest`, Megatron's tracker): a restored
// copy has none.
Result<LayoutVerdict> CheckLayout(const std::filesystem::path& dir, const std::vector<CheckpointFile>& files,
                                  const ValidatorOptions& options, bool has_manifest);

// DCP: every `.metadata` of the directory against its shards (dcp_layout.cpp).
Status CheckDcpLayout(const std::filesystem::path& dir, const std::vector<CheckpointFile>& files,
                      const ValidatorOptions& options, LayoutVerdict& verdict);

}  // namespace spotvisor::checkpoint

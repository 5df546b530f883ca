// Fencing: a checkpoint written by an epoch the group had already left behind (a zombie
// trainer on a node cut off from the group, or a save that landed after the group moved on)
// is never resumed from. The rule compares steps and epochs only, never clocks. Pure except
// ReadFence/ManifestEpoch (files). Any thread.
#pragma once

#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include "spotvisor/state/journal.hpp"

namespace spotvisor::checkpoint {

// An epoch as the state dir recorded it: the step its trainers started from (0: fresh).
struct EpochStart {
  std::uint64_t epoch = 0;
  std::uint64_t step = 0;
};

// A checkpoint whose manifest says epoch E and whose step X is greater than the start step
// S of some recorded later epoch E' > E is fenced: by the time it was written (or whenever
// it was), the group had started E' from S < X, so X belongs to a history the group left.
// A checkpoint without an epoch in its manifest is never fenced.
class Fence {
 public:
  Fence() = default;
  explicit Fence(std::vector<EpochStart> starts);
  // The epochs of the attempt records that carry one; an epoch recorded more than once
  // (its attempts, or a record per retry) keeps its lowest start step.
  static Fence FromAttempts(const std::vector<state::AttemptRecord>& records);

  // Why a checkpoint of `epoch` at `step` is fenced, naming both epochs and steps; none
  // when it is not (or `epoch` is none).
  std::optional<std::string> Reason(std::optional<std::uint64_t> epoch, std::uint64_t step) const;
  bool empty() const { return starts_.empty(); }
  const std::vector<EpochStart>& starts() const { return starts_; }

 private:
  std::vector<EpochStart> starts_;  // one per epoch, ascending by epoch
};

// The fence of the job whose state dir is `state_dir`: its attempts.jsonl, and the newest
// start in state.json (its attempt may still run); empty when the path is empty or holds
// no epoch.
Fence ReadFence(const std::filesystem::path& state_dir);

// The epoch in the manifest of `checkpoint`; none when it has no manifest, one that cannot
// be read or parsed (validation reports that), or one without an epoch.
std::optional<std::uint64_t> ManifestEpoch(const std::filesystem::path& checkpoint, bool is_directory);

}  // namespace spotvisor::checkpoint

// Fencing; see fence.hpp. Why this rule: no clocks are compared (a zombie's mtime and ours
// need not agree), so every node reaches the same answer from its own records, offline.
// And in a group the agreed start is the newest step good on *every* node, so one node that
// knows of the later epoch suffices to keep a zombie's step out of the agreement.
#include "spotvisor/checkpoint/fence.hpp"

#include <algorithm>
#include <map>

#include "spotvisor/checkpoint/manifest.hpp"

namespace spotvisor::checkpoint {
namespace {

namespace fs = std::filesystem;

}  // namespace

Fence::Fence(std::vector<EpochStart> starts) {
  std::map<std::uint64_t, std::uint64_t> lowest;
  for (const auto& s : starts) {
    auto [it, inserted] = lowest.emplace(s.epoch, s.step);
    if (!inserted) it->second = std::min(it->second, s.step);
  }
  for (const auto& [epoch, step] : lowest) starts_.push_back({epoch, step});
}

Fence Fence::FromAttempts(const std::vector<state::AttemptRecord>& records) {
  std::vector<EpochStart> starts;
  for (const auto& r : records) {
    if (r.epoch) starts.push_back({*r.epoch, r.resume_step.value_or(0)});
  }
  return Fence(std::move(starts));
}

std::optional<std::string> Fence::Reason(std::optional<std::uint64_t> epoch, std::uint64_t step) const {
  if (!epoch) return std::nullopt;
  // The first later epoch that started below `step` is named: the earliest proof.
  for (const auto& later : starts_) {
    if (later.epoch <= *epoch || later.step >= step) continue;
    return "written by epoch " + std::to_string(*epoch) + " at step " + std::to_string(step) + " after epoch " +
           std::to_string(later.epoch) + " had started from step " + std::to_string(later.step) +
           " (a writer the group had left behind: fenced)";
  }
  return std::nullopt;
}

Fence ReadFence(const fs::path& state_dir) {
  if (state_dir.empty()) return Fence();
  auto records = state::ReadAttemptRecords(state_dir);
  // The newest start, whose record comes only when its attempt ends. A corrupt state.json
  // is the supervisor's to report; the records alone still fence.
  if (auto journal = state::Journal::Open(state_dir); journal && journal->state().last_epoch) {
    state::AttemptRecord running;
    running.epoch = journal->state().last_epoch;
    running.resume_step = journal->state().last_epoch_step;
    records.push_back(running);
  }
  return Fence::FromAttempts(records);
}

std::optional<std::uint64_t> ManifestEpoch(const fs::path& checkpoint, bool is_directory) {
  const fs::path path = ManifestPathFor(checkpoint, is_directory);
  std::error_code ec;
  if (!fs::is_regular_file(path, ec)) return std::nullopt;
  auto manifest = ReadManifestFile(path);
  if (!manifest) return std::nullopt;
  return manifest->epoch;
}

}  // namespace spotvisor::checkpoint

// The directory form of the mirror (`checkpoints.mirror.path`): verified atomic copies
// (tree_copy.hpp), retention by step on the mirror, restore by copying back. Worker
// threads only; see mirror_store.hpp.
#pragma once

#include <mutex>

#include "spotvisor/config/name_pattern.hpp"
#include "spotvisor/mirror/mirror_store.hpp"

namespace spotvisor::mirror {

class PathMirror final : public MirrorStore {
 public:
  // `job` outlives the store; `job.checkpoints.mirror.path` is set.
  PathMirror(const config::JobConfig& job, config::NamePattern pattern);

  std::string Describe() const override;
  Result<UploadResult> Upload(const MirrorItem& item, const CopyControl& control) override;
  Result<std::vector<std::string>> Prune(int keep, const CopyControl& control) override;
  Result<RestoreResult> Restore(std::optional<std::uint64_t> local_step, const CopyControl& control) override;

 private:
  const config::JobConfig& job_;  // not owned
  std::filesystem::path dir_;     // the mirror directory
  config::NamePattern pattern_;   // checkpoints.pattern
  std::mutex prune_mutex_;        // one Prune at a time
};

}  // namespace spotvisor::mirror

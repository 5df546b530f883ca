// Where checkpoints are mirrored (`checkpoints.mirror`): a directory (a mounted bucket,
// NFS, a persistent disk) or a user command (`rclone`, `aws s3 cp`). Upload one validated
// checkpoint, apply retention on the mirror, and restore the newest good checkpoint from
// it into an empty or older local directory. Blocking: worker threads only; Upload may run
// on several threads at once (bounded by the caller), Prune and Restore serialize.
#pragma once

#include <atomic>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <memory>
#include <optional>
#include <string>

#include "spotvisor/config/job_config.hpp"
#include "spotvisor/mirror/tree_copy.hpp"
#include "spotvisor/util/result.hpp"

namespace spotvisor::process {
class ChildTable;
}  // namespace spotvisor::process

namespace spotvisor::mirror {

// Where a restore from an object store or a command gathers what it fetched, inside
// checkpoints.dir (suffixed with spotvisor's pid; no catalog counts it).
inline constexpr std::string_view kRestoreStaging = ".spotvisor-mirror-restore";

// One checkpoint to mirror.
struct MirrorItem {
  std::filesystem::path path;  // the local checkpoint
  std::string name;            // its entry name
  std::uint64_t step = 0;
};

enum class UploadResult { kUploaded, kAlreadyThere };

// What a restore did.
struct RestoreResult {
  std::optional<MirrorItem> restored;  // the checkpoint now in checkpoints.dir, validated
  std::string detail;                  // why nothing was restored, or what was skipped
};

class MirrorStore {
 public:
  virtual ~MirrorStore() = default;
  // "path /mnt/bucket/job" or "command rclone" for logs.
  virtual std::string Describe() const = 0;
  virtual Result<UploadResult> Upload(const MirrorItem& item, const CopyControl& control) = 0;
  // Whether UploadEarly does anything: a store whose Upload then finds the early files and
  // sends only the rest.
  virtual bool UploadsEarly() const { return false; }
  // Before the checkpoint validates (a directory being written during a stop): puts one of
  // its closed files, `relative` to item.path, where Upload will find it, and nothing more:
  // the checkpoint is complete on the mirror only once Upload, after the good verdict, says
  // so. A name that was complete before (its older checkpoint) is no longer, from the first
  // file on.
  virtual Status UploadEarly(const MirrorItem& item, const std::filesystem::path& relative,
                             const CopyControl& control) {
    (void)item, (void)relative, (void)control;
    return Ok{};
  }
  // Deletes mirrored checkpoints beyond `keep` (newest kept; 0 = keep all); returns names.
  // `control.stop` cancels it (a command or an rclone call under way is killed).
  virtual Result<std::vector<std::string>> Prune(int keep, const CopyControl& control) = 0;
  // Fetches the newest good checkpoint newer than `local_step` (nullopt: the local dir has
  // no good one) into checkpoints.dir, validated there.
  virtual Result<RestoreResult> Restore(std::optional<std::uint64_t> local_step, const CopyControl& control) = 0;
};

// The store the job's config describes; nullptr when no mirror is configured. A command
// mirror starts its commands through `children`, which outlives the store.
std::unique_ptr<MirrorStore> MakeMirrorStore(const config::JobConfig& job, process::ChildTable& children);

// Moves or copies candidates (newest step first, only those newer than `local_step`) from
// `source_dir` into checkpoints.dir and validates each copy there; the first good one
// wins, bad copies are removed. `transfer(entry_path, name)` does the move or copy.
Result<RestoreResult> RestoreNewestFrom(
    const config::JobConfig& job, const std::filesystem::path& source_dir, std::optional<std::uint64_t> local_step,
    const std::function<Status(const std::filesystem::path&, const std::string&)>& transfer);

}  // namespace spotvisor::mirror

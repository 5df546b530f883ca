// The object-store form of the mirror (`checkpoints.mirror.remote`, an rclone remote such
// as `s3:bucket/prefix`): spotvisor runs rclone itself, so that a checkpoint counts as on
// the mirror only once it is whole there. Layout under the remote:
//   <name>                              the checkpoint (a file, or a directory's files)
//   .spotvisor-complete/<name>.json     its marker, written after the last byte was
//                                       uploaded and the sizes listed back matched, and
//                                       deleted before other bytes go under that name
// An upload cut short (spotvisor killed, the server failing) leaves no marker, so no
// restore ever starts from it and the next upload of that name replaces it. Retention
// deletes the marker first. A restore fetches the newest marked checkpoint newer than the
// local one, checks its bytes against the marker, validates it, and falls back to older
// ones. Worker threads only; see mirror_store.hpp.
#pragma once

#include <mutex>
#include <vector>

#include "spotvisor/config/name_pattern.hpp"
#include "spotvisor/mirror/mirror_store.hpp"

namespace spotvisor::process {
class ChildTable;
}  // namespace spotvisor::process

namespace spotvisor::mirror {

inline constexpr std::string_view kCompleteDir = ".spotvisor-complete";

class RemoteMirror final : public MirrorStore {
 public:
  // `job` and `children` (where rclone starts) outlive the store; `job.checkpoints.mirror.remote`
  // is set.
  RemoteMirror(const config::JobConfig& job, config::NamePattern pattern, process::ChildTable& children);

  std::string Describe() const override;
  Result<UploadResult> Upload(const MirrorItem& item, const CopyControl& control) override;
  bool UploadsEarly() const override { return true; }
  Status UploadEarly(const MirrorItem& item, const std::filesystem::path& relative,
                     const CopyControl& control) override;
  Result<std::vector<std::string>> Prune(int keep, const CopyControl& control) override;
  Result<RestoreResult> Restore(std::optional<std::uint64_t> local_step, const CopyControl& control) override;

 private:
  // What a marker says about its checkpoint.
  struct Marker {
    std::string name;
    std::uint64_t step = 0;
    std::uint64_t bytes = 0;
    std::size_t files = 0;
    bool directory = false;
  };
  // Runs `rclone <args> <flags>`; its output lines go to `lines` when given.
  Status Rclone(std::vector<std::string> args, const CopyControl& control, const std::string& what,
                std::vector<std::string>* lines = nullptr, bool bandwidth = false) const;
  // The names that have a marker, newest step first.
  Result<std::vector<Marker>> Complete(const CopyControl& control) const;
  Result<Marker> ReadMarker(const std::string& name, const CopyControl& control) const;
  Status WriteMarker(const Marker& marker, const CopyControl& control) const;
  Status DeleteMarker(const std::string& name, const CopyControl& control) const;
  // Sum and count of the sizes rclone lists under <remote>/<name>.
  Result<std::pair<std::uint64_t, std::size_t>> ListedBytes(const std::string& name, const CopyControl& control) const;
  Status Fetch(const Marker& marker, const std::filesystem::path& staging, const CopyControl& control) const;
  std::string At(const std::string& name) const;  // <remote>/<name>

  const config::JobConfig& job_;   // not owned
  process::ChildTable& children_;  // not owned
  std::string remote_;             // without a trailing '/'
  config::NamePattern pattern_;    // checkpoints.pattern
  std::mutex prune_mutex_;         // one Prune at a time
  std::mutex early_mutex_;         // guards early_name_
  std::string early_name_;         // the name UploadEarly last looked for a marker of
};

}  // namespace spotvisor::mirror

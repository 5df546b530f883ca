// The command form of the mirror (`checkpoints.mirror.command`, e.g. `rclone copy
// {checkpoint} remote:bucket/{job}/{name}`): argv templates, run through the one command
// runner (process/blocking_command.hpp) with `mirror.timeout`. What was uploaded is remembered in
// `<state_dir>/mirror.json` so that retention can run `mirror.prune_command` for the oldest, and
// `mirror.restore_command` fetches the mirror into a staging dir for a restore. Worker threads only.
#pragma once

#include <mutex>
#include <vector>

#include "spotvisor/config/templates.hpp"
#include "spotvisor/mirror/mirror_store.hpp"

namespace spotvisor::process {
class ChildTable;
}  // namespace spotvisor::process

namespace spotvisor::mirror {

class CommandMirror final : public MirrorStore {
 public:
  // `job` and `children` (where the commands start) outlive the store;
  // `job.checkpoints.mirror.command` is not empty.
  CommandMirror(const config::JobConfig& job, process::ChildTable& children);

  std::string Describe() const override;
  Result<UploadResult> Upload(const MirrorItem& item, const CopyControl& control) override;
  Result<std::vector<std::string>> Prune(int keep, const CopyControl& control) override;
  Result<RestoreResult> Restore(std::optional<std::uint64_t> local_step, const CopyControl& control) override;

 private:
  struct Uploaded {
    std::string name;
    std::uint64_t step = 0;
  };
  std::vector<Uploaded> Load() const;  // mirror.json; empty when absent or unreadable
  Status Save(const std::vector<Uploaded>& uploaded) const;
  Status Run(const std::vector<std::string>& argv_template, const config::TemplateVars& vars,
             const CopyControl& control, const std::string& what) const;
  config::TemplateVars Vars(const MirrorItem* item) const;

  const config::JobConfig& job_;   // not owned
  process::ChildTable& children_;  // not owned
  std::filesystem::path record_;   // <state_dir>/mirror.json
  mutable std::mutex mutex_;       // guards mirror.json
};

}  // namespace spotvisor::mirror

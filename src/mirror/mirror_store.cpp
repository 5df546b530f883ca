// The mirror store factory and the restore loop both forms share; see mirror_store.hpp.
#include "spotvisor/mirror/mirror_store.hpp"

#include "spotvisor/checkpoint/catalog.hpp"
#include "spotvisor/checkpoint/validator.hpp"
#include "spotvisor/log/log.hpp"
#include "spotvisor/mirror/command_mirror.hpp"
#include "spotvisor/mirror/path_mirror.hpp"
#include "spotvisor/mirror/remote_mirror.hpp"

namespace spotvisor::mirror {
namespace {

namespace fs = std::filesystem;
using log::Log;
using log::LogLevel;
using log::Quote;

}  // namespace

std::unique_ptr<MirrorStore> MakeMirrorStore(const config::JobConfig& job, process::ChildTable& children) {
  const auto& m = job.checkpoints.mirror;
  if (!job.checkpoints.dir) return nullptr;
  auto pattern = config::NamePattern::Parse(job.checkpoints.pattern);
  if (!pattern) return nullptr;  // Finalize has already refused such a pattern
  if (m.path) return std::make_unique<PathMirror>(job, std::move(*pattern));
  if (m.remote) return std::make_unique<RemoteMirror>(job, std::move(*pattern), children);
  if (!m.command.empty()) return std::make_unique<CommandMirror>(job, children);
  return nullptr;
}

Result<RestoreResult> RestoreNewestFrom(const config::JobConfig& job, const fs::path& source_dir,
                                        std::optional<std::uint64_t> local_step,
                                        const std::function<Status(const fs::path&, const std::string&)>& transfer) {
  // The mirror's names only: a view of another directory, no cache, no retention.
  auto o = checkpoint::CatalogOptionsFor(job, /*acts=*/false);
  o.dir = fs::absolute(source_dir);
  o.cache_file.clear();
  o.keep = 0;
  auto catalog = checkpoint::Catalog::Create(std::move(o));
  if (!catalog) return catalog.error();
  auto entries = catalog->Scan();
  if (!entries) return entries.error();
  const fs::path local_dir = fs::absolute(*job.checkpoints.dir);
  checkpoint::ValidatorOptions v = checkpoint::ValidatorOptionsFor(job.checkpoints);
  v.root = local_dir;
  RestoreResult result;
  for (const auto& e : *entries) {  // newest first
    if (local_step && e.step <= *local_step) break;
    if (!e.scan_error.empty()) continue;
    if (Status s = transfer(e.path, e.name); !s) {
      Log(LogLevel::kWarning,
          "event=mirror_restore_skipped name=" + Quote(e.name) + " error=" + Quote(s.error().message));
      result.detail += e.name + ": " + s.error().message + "; ";
      continue;
    }
    const fs::path copy = local_dir / e.name;
    const checkpoint::Verdict verdict = checkpoint::ValidateCheckpoint(copy, v);
    if (verdict.good) {
      result.restored = MirrorItem{copy, e.name, e.step};
      return result;
    }
    Log(LogLevel::kWarning, "event=mirror_restore_rejected name=" + Quote(e.name) + " reason=" + Quote(verdict.reason));
    result.detail += e.name + ": " + verdict.reason + "; ";
    std::error_code ec;
    fs::remove_all(copy, ec);
  }
  if (result.detail.empty()) {
    result.detail = local_step ? "the mirror has nothing newer than step " + std::to_string(*local_step)
                               : "the mirror has no checkpoint";
  }
  return result;
}

}  // namespace spotvisor::mirror

// The checkpoints.dir keeper; see dir_keeper.hpp. Everything below except the constructor,
// the destructor and KeptSelector runs on the keeper's thread.
#include "spotvisor/checkpoint_watch/dir_keeper.hpp"

#include <chrono>
#include <utility>

#include "spotvisor/log/log.hpp"

namespace spotvisor::checkpoint_watch {
namespace {

using log::Log;
using log::LogLevel;
using log::Quote;

std::filesystem::path DirOf(const config::JobConfig& job) { return std::filesystem::absolute(*job.checkpoints.dir); }

class KeptSelector final : public checkpoint::ResumeSelector {
 public:
  explicit KeptSelector(std::shared_ptr<DirKeeper> keeper) : keeper_(std::move(keeper)) {}
  // On the driver's selection thread: waits while the keeper selects.
  Result<checkpoint::Selection> SelectForResume() override {
    return keeper_->Call([keeper = keeper_.get()] { return keeper->SelectForResume(); });
  }

 private:
  std::shared_ptr<DirKeeper> keeper_;  // shared with the watcher and the mirror
};

}  // namespace

DirKeeper::DirKeeper(const config::JobConfig& job, Clock& clock)
    : job_(job), clock_(clock), validated_(DirOf(job), {}), for_selection_(DirOf(job), {}) {}

DirKeeper::~DirKeeper() { thread_.join(); }

checkpoint::Catalog* DirKeeper::catalog() {
  if (catalog_) return &*catalog_;
  auto made = checkpoint::Catalog::FromConfig(job_);
  if (!made) {
    if (!catalog_failed_) Log(LogLevel::kError, "event=checkpoint_catalog_failed error=" + Quote(made.error().message));
    catalog_failed_ = true;
    return nullptr;
  }
  catalog_.emplace(std::move(*made));
  SetHeld(*catalog_);
  return &*catalog_;
}

void DirKeeper::Judge(checkpoint::CatalogEntry& e) {
  const auto level = job_.checkpoints.validate;
  auto* c = catalog();
  if (auto known = validated_.Find(e.name, e.key, level); known && e.scan_error.empty()) {
    e.verdict = *known;
    e.from_cache = true;
    if (c) c->Remember(e, *known);  // for retention's look at the cache
    return;
  }
  if (!c) {
    e.verdict = checkpoint::Verdict{false, "the checkpoint catalog is unavailable", ""};
    return;
  }
  const auto started = clock_.Now();
  std::vector<checkpoint::CatalogEntry> one{e};
  c->Judge(one, /*use_cache=*/false);
  e = std::move(one[0]);
  if (e.scan_error.empty()) validated_.Put(e.name, e.key, level, *e.verdict);
  const auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(clock_.Now() - started);
  Log(LogLevel::kDebug, "event=checkpoint_validated path=" + Quote(e.path.string()) +
                            " step=" + std::to_string(e.step) + " verdict=" + (e.verdict->good ? "good" : "bad") +
                            " ms=" + std::to_string(ms.count()) + " by=watcher");
}

void DirKeeper::ApplyRetention() {
  auto* c = catalog();
  if (!c || c->options().keep <= 0) return;
  // A long run keeps `keep` good checkpoints on disk, not only at the next (re)start.
  if (auto deleted = c->ApplyRetention(/*judged_only=*/true); !deleted) {
    Log(LogLevel::kWarning, "event=retention_failed error=" + Quote(deleted.error().message));
  }
}

void DirKeeper::RefreshFence() {
  if (auto* c = catalog()) c->SetFence(checkpoint::ReadFence(job_.telemetry.state_dir));
}

Result<checkpoint::Selection> DirKeeper::SelectForResume() {
  // A fresh catalog: the job's config may be reloaded between attempts, and the cache file
  // must be re-read in case another tool (spotvisor checkpoints) refreshed it.
  auto fresh = checkpoint::Catalog::FromConfig(job_);
  checkpoint::VerdictCache restored = std::move(for_selection_);
  for_selection_ = checkpoint::VerdictCache(DirOf(job_), {});
  if (!fresh) return fresh.error();
  catalog_.emplace(std::move(*fresh));
  SetHeld(*catalog_);
  catalog_failed_ = false;
  HoldStart({});  // this selection's retention decides what the last start held
  auto selection = catalog_->Select(/*act=*/true, &restored);
  if (selection) {
    std::set<std::filesystem::path> candidates;
    for (const auto& point : selection->good) candidates.insert(point.path);
    HoldStart(std::move(candidates));
  }
  return selection;
}

std::optional<checkpoint::ResumePoint> DirKeeper::NewestGood(bool for_selection) {
  auto* c = catalog();
  if (!c) return std::nullopt;
  auto entries = c->Scan();
  if (!entries) return std::nullopt;
  const auto level = job_.checkpoints.validate;
  for (auto& e : *entries) {  // newest first
    // A fenced one (fence.hpp) is never resumed from, so neither is it the newest good.
    if (!e.scan_error.empty() || c->FencedBecause(e)) continue;
    std::optional<checkpoint::Verdict> verdict =
        for_selection ? for_selection_.Find(e.name, e.key, level) : std::nullopt;
    if (!verdict) {
      if (for_selection) {
        std::vector<checkpoint::CatalogEntry> one{e};
        c->Judge(one, /*use_cache=*/false);
        verdict = one[0].verdict;
        validated_.Put(e.name, e.key, level, *verdict);
      } else {
        Judge(e);
        verdict = e.verdict;
      }
    }
    if (for_selection) for_selection_.Put(e.name, e.key, level, *verdict);
    if (verdict->good) return checkpoint::ResumePoint{e.path, e.step};
  }
  return std::nullopt;
}

void DirKeeper::NoteRestored(const std::filesystem::path& path) {
  auto* c = catalog();
  if (!c) return;
  auto entries = c->Scan();
  if (!entries) return;
  for (const auto& e : *entries) {
    if (e.name != path.filename().string() || !e.scan_error.empty()) continue;
    const checkpoint::Verdict good{true, "restored from the mirror and validated there", ""};
    for_selection_.Put(e.name, e.key, job_.checkpoints.validate, good);
    validated_.Put(e.name, e.key, job_.checkpoints.validate, good);
  }
}

void DirKeeper::KeepFixedVersion() {
  auto* c = catalog();
  auto* versions = c ? c->versions() : nullptr;
  if (!versions) return;
  auto entries = c->Scan();
  if (!entries || entries->empty() || !entries->front().scan_error.empty()) return;
  const auto& e = entries->front();
  if (kept_key_ == e.key) return;
  auto verdict = validated_.Find(e.name, e.key, job_.checkpoints.validate);
  if (!verdict) verdict = c->KnownVerdict(e);
  if (!verdict || !verdict->good) return;
  const auto started = clock_.Now();
  auto kept = versions->Keep({e.key.size, e.key.mtime_ns, e.key.inode}, [this] { return stopping_.load(); });
  if (!kept) {
    kept_key_ = e.key;  // not again for this content: the next save is another chance
    Log(LogLevel::kError,
        "event=checkpoint_version_not_kept path=" + Quote(e.path.string()) + " error=" + Quote(kept.error().message));
    return;
  }
  using Kind = versions::KeepOutcome::Kind;
  if (kept->kind == Kind::kAbandoned) {
    if (!std::exchange(said_deferred_, true)) {
      Log(LogLevel::kInfo, "event=checkpoint_version_deferred path=" + Quote(e.path.string()) +
                               " reason=\"the trainer is being stopped and this filesystem has no reflink: the copy "
                               "waits until the trainer has exited\"");
    }
    return;
  }
  said_deferred_ = false;
  if (kept->kind == Kind::kChanged) return;  // a new save began; the watcher judges it
  kept_key_ = e.key;
  if (kept->kind == Kind::kAlreadyKept) return;
  const auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(clock_.Now() - started);
  Log(LogLevel::kInfo,
      "event=checkpoint_version_kept path=" + Quote(e.path.string()) +
          " version=" + Quote(kept->version.path.string()) + " step=" + std::to_string(kept->version.generation) +
          " bytes=" + std::to_string(kept->stats.bytes) + " copied_bytes=" + std::to_string(kept->stats.copied_bytes) +
          " method=" + (kept->stats.reflinked() ? "reflink" : "copy") + " ms=" + std::to_string(ms.count()));
  for (const auto& gone : kept->deleted) {
    Log(LogLevel::kInfo,
        "event=checkpoint_version_deleted path=" + Quote(gone.string()) + " keep=" + std::to_string(versions->keep()));
  }
}

void DirKeeper::HoldUntilDurable() {
  std::lock_guard lock(hold_mutex_);
  hold_ = true;
}

void DirKeeper::MarkUploading(const std::string& name, bool uploading) {
  std::lock_guard lock(hold_mutex_);
  if (uploading) {
    uploading_.insert(name);
  } else {
    uploading_.erase(name);
  }
}

void DirKeeper::MarkDurable(std::uint64_t step) {
  std::lock_guard lock(hold_mutex_);
  if (!durable_step_ || step > *durable_step_) durable_step_ = step;
}

void DirKeeper::HoldStart(std::set<std::filesystem::path> paths) {
  std::lock_guard lock(hold_mutex_);
  start_ = std::move(paths);
}

std::optional<std::string> DirKeeper::HeldBecause(const checkpoint::CatalogEntry& e) {
  std::lock_guard lock(hold_mutex_);
  if (start_.count(e.path) != 0) return "a start is or may be made from it";
  if (!hold_) return std::nullopt;
  if (uploading_.count(e.name) != 0) return "it is being uploaded to the mirror";
  if (!durable_step_) return "the mirror holds no checkpoint of this job yet";
  if (e.step > *durable_step_) {
    return "it is newer than the newest checkpoint on the mirror (step " + std::to_string(*durable_step_) + ")";
  }
  return std::nullopt;
}

void DirKeeper::SetHeld(checkpoint::Catalog& c) {
  c.SetHeld([this](const checkpoint::CatalogEntry& e) { return HeldBecause(e); });
}

std::unique_ptr<checkpoint::ResumeSelector> MakeKeptSelector(std::shared_ptr<DirKeeper> keeper) {
  return std::make_unique<KeptSelector>(std::move(keeper));
}

}  // namespace spotvisor::checkpoint_watch

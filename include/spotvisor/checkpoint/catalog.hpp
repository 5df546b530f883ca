// The checkpoint catalog of one job: finds checkpoints in checkpoints.dir by pattern,
// judges them (cache or validation), picks the newest good one, and — only when asked to
// act (during `run`) — quarantines bad newer ones, applies retention, replaces the
// `latest` link, rewrites DeepSpeed/Megatron hints and saves the verdict cache.
// Blocking; call from a worker thread, never the io thread. One call at a time.
#pragma once

#include <cstdint>
#include <filesystem>
#include <functional>
#include <optional>
#include <set>
#include <span>
#include <string>
#include <vector>

#include "spotvisor/checkpoint/fence.hpp"
#include "spotvisor/checkpoint/resume_selector.hpp"
#include "spotvisor/checkpoint/validator.hpp"
#include "spotvisor/checkpoint/verdict_cache.hpp"
#include "spotvisor/config/job_config.hpp"
#include "spotvisor/config/name_pattern.hpp"
#include "spotvisor/versions/version_store.hpp"

namespace spotvisor::checkpoint {

inline constexpr std::string_view kQuarantineDir = ".spotvisor-quarantine";
inline constexpr std::string_view kCacheFileName = "checkpoint-cache.tsv";
// With checkpoints.content: finite, verdicts answer a stricter question: they keep a cache
// of their own, so that neither answers for the other.
inline constexpr std::string_view kFiniteCacheFileName = "checkpoint-cache-finite.tsv";

struct CatalogEntry {
  std::string name;            // entry in checkpoints.dir
  std::filesystem::path path;  // checkpoints.dir / name
  std::uint64_t step = 0;      // a fixed name: its generation (version_store.hpp)
  bool is_directory = false;
  CacheKey key;                    // size (all files), newest mtime, inode
  std::optional<Verdict> verdict;  // after Judge
  bool from_cache = false;         // verdict came from the cache
  std::string scan_error;          // cannot stat / walk: bad without validating
};

struct CatalogOptions {
  std::filesystem::path dir;  // absolute, no trailing slash
  std::string pattern;
  ValidatorOptions validator;        // level, format, marker, root = dir
  std::filesystem::path cache_file;  // empty: no cache
  bool quarantine = true;
  int keep = 0;             // 0 = keep all
  std::string latest_link;  // empty = none
  bool rewrite_hints = false;
  // A selection judges the older checkpoints too, not only up to the newest good one: a
  // multi-node group resumes from the newest step good on every node (coordination.etcd).
  bool judge_older = false;
  // A selection applies `keep` (a group's does not: a node joining again may not know the
  // epoch the others ran meanwhile, which fences a left-behind writer's saves; its running
  // trainer's new checkpoints prune instead, see CheckpointWatcher::MayPrune).
  bool prune_at_selection = true;
  // The epochs the state dir recorded: a checkpoint written by an epoch the group had left
  // is never selected, counted as good, quarantined or deleted (fence.hpp).
  Fence fence;
  // Why a good checkpoint beyond `keep` must stay anyway (the mirror's hold: it is being
  // uploaded, or is newer than the newest one on the mirror); none: retention may delete
  // it. A held checkpoint counts as kept. Called on the catalog's thread.
  std::function<std::optional<std::string>(const CatalogEntry&)> held;
};

// The job's catalog options (checkpoints.*, the cache and the fence from
// telemetry.state_dir, read now); `dir` must be set. A view (`acts` false) changes nothing at selection: no quarantine,
// no latest link, no hint rewrite (checkpoints.keep still applies where its owner calls ApplyRetention).
CatalogOptions CatalogOptionsFor(const config::JobConfig& job, bool acts = true);

class Catalog {
 public:
  static Result<Catalog> Create(CatalogOptions options);
  // From a finalized job config; cache in telemetry.state_dir.
  static Result<Catalog> FromConfig(const config::JobConfig& job);

  // Entries matching the pattern, newest step first (ties by name). A missing dir is
  // empty; an unreadable dir is an Error; an unreadable entry carries scan_error.
  Result<std::vector<CatalogEntry>> Scan() const;

  // Temp-named entries (half-written saves; not spotvisor's own `.spotvisor-*`), sorted,
  // adding their size to `bytes` (a directory: every regular file under it).
  std::vector<std::filesystem::path> TempEntries(std::uint64_t& bytes) const;

  // Fills each entry's verdict: from the cache when `use_cache` and the key matches, else
  // by validating now (and remembering it in the in-memory cache).
  void Judge(std::vector<CatalogEntry>& entries, bool use_cache);

  // The newest good checkpoint, validated now. With `act`, bad newer ones are
  // quarantined (when configured), then retention, the latest link, hints and the cache
  // file are updated; for a fixed name whose file in place is missing or bad, the newest
  // kept version that validates is put back in place and chosen. Without `act` nothing on disk changes. `validated_now`
  // holds verdicts reached by validation moments ago in the same selection (a mirror restore's): one whose key still
  // matches counts as validated now instead of reading it twice.
  Result<Selection> Select(bool act, const VerdictCache* validated_now = nullptr);

  // Deletes good checkpoints beyond `keep`, oldest first; never the newest good one,
  // never one newer than the keep-th good one, never a temp name. Fenced ones count apart:
  // the newest `keep` of them stay (for people to look at), older ones go. Uses cached verdicts;
  // an entry without one is validated now, or with `judged_only` passed over (a watcher
  // judges it soon, and reading it here would read it twice).
  Result<std::vector<std::filesystem::path>> ApplyRetention(bool judged_only = false);

  // Why `entry` is fenced (fence.hpp), reading its manifest's epoch; none when it is not,
  // and nothing is read while the fence is empty.
  std::optional<std::string> FencedBecause(const CatalogEntry& entry) const;

  // A verdict the cache holds for this entry's name and key; none when it holds none.
  std::optional<Verdict> KnownVerdict(const CatalogEntry& entry) const {
    return entry.scan_error.empty() ? cache_.Find(entry.name, entry.key, options_.validator.level) : std::nullopt;
  }
  // The kept versions of a fixed-name checkpoint; null for a pattern with {step}.
  versions::VersionStore* versions() { return versions_ ? &*versions_ : nullptr; }
  const versions::VersionStore* versions() const { return versions_ ? &*versions_ : nullptr; }
  // A kept version as an entry (name: .spotvisor-versions/v<N>/<name>), for listings.
  CatalogEntry EntryOf(const versions::KeptVersion& version) const;

  // Remembers a verdict reached elsewhere for this entry's name and key (memory only).
  void Remember(const CatalogEntry& entry, const Verdict& verdict) {
    cache_.Put(entry.name, entry.key, options_.validator.level, verdict);
  }

  Status SaveCache() const { return cache_.Save(); }
  // Sets options().held (the owner's hold lives longer than one catalog).
  void SetHeld(std::function<std::optional<std::string>(const CatalogEntry&)> held) { options_.held = std::move(held); }
  // Replaces options().fence (the state dir recorded a new start since the catalog was made).
  void SetFence(Fence fence) { options_.fence = std::move(fence); }
  const CatalogOptions& options() const { return options_; }

 private:
  Catalog(CatalogOptions options, config::NamePattern pattern);
  Verdict Validate(const CatalogEntry& entry) const;
  Result<std::filesystem::path> Quarantine(const CatalogEntry& entry) const;
  // A fenced entry becomes a Rejection (logged when `act`), never moved: true. Else false.
  bool PassOverFenced(const CatalogEntry& entry, bool act, Selection& selection) const;
  Status AfterChoice(const CatalogEntry& chosen, bool fell_back);
  // Select's steps: an entry's verdict, a bad one's rejection, the temp leftovers' log line,
  // and the good ones older than the chosen one.
  Verdict Judge(const CatalogEntry& e, bool act, const VerdictCache* validated_now);
  Rejection Reject(const CatalogEntry& e, bool act);
  void SayTempLeft(const Selection& selection) const;
  void AddOlderGood(std::span<CatalogEntry> older, bool act, Selection& selection);
  // The newest kept version that validates, put back in place; none when none is good.
  // `selection` says what was in place (rejected, maybe quarantined), for the log.
  std::optional<CatalogEntry> RestoreNewestVersion(const Selection& selection);

  CatalogOptions options_;                          // as given; dir absolute
  config::NamePattern pattern_;                     // parsed options_.pattern
  VerdictCache cache_;                              // loaded at creation
  std::set<std::string> said_held_;                 // held names already logged (retention_held, once each)
  std::optional<versions::VersionStore> versions_;  // a fixed name's kept versions
};

}  // namespace spotvisor::checkpoint

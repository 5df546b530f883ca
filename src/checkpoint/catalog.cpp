// The checkpoint catalog; see catalog.hpp. Only Select(act=true) and ApplyRetention touch
// the disk; listing commands use Scan/Judge/Select(false), which never write anything.
#include "spotvisor/checkpoint/catalog.hpp"

#include <sys/stat.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <span>

#include "framework_layout.hpp"
#include "spotvisor/checkpoint/atomic_link.hpp"
#include "spotvisor/checkpoint/hash_pool.hpp"
#include "spotvisor/checkpoint/hints.hpp"
#include "spotvisor/checkpoint/manifest.hpp"
#include "spotvisor/log/log.hpp"
#include "spotvisor/util/atomic_file.hpp"

namespace spotvisor::checkpoint {

using log::Log;
using log::LogLevel;
using log::Quote;

namespace {

namespace fs = std::filesystem;

std::int64_t MtimeNs(const struct stat& st) {
  return static_cast<std::int64_t>(st.st_mtim.tv_sec) * 1'000'000'000 + st.st_mtim.tv_nsec;
}

}  // namespace

// Size of every file, newest mtime of anything, inode of the top: the cache key. Never
// follows symlinks inside a directory.
Result<CacheKey> CheckpointKey(const fs::path& path, bool& is_directory) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) {
    return Error{path.string() + ": cannot stat (" + std::string(std::strerror(errno)) + ")"};
  }
  CacheKey key{static_cast<std::uint64_t>(st.st_size), MtimeNs(st), static_cast<std::uint64_t>(st.st_ino)};
  is_directory = S_ISDIR(st.st_mode);
  if (!is_directory) return key;
  key.size = 0;
  std::error_code ec;
  fs::recursive_directory_iterator it(path, fs::directory_options::none, ec);
  for (; !ec && it != fs::recursive_directory_iterator(); it.increment(ec)) {
    struct stat sub {};
    if (::lstat(it->path().c_str(), &sub) != 0) continue;
    key.mtime_ns = std::max(key.mtime_ns, MtimeNs(sub));
    if (S_ISREG(sub.st_mode)) key.size += static_cast<std::uint64_t>(sub.st_size);
  }
  if (ec) return Error{path.string() + ": cannot list (" + ec.message() + ")"};
  // A framework's commit marker beside the directory (DeepSpeed's `latest`) is part of
  // its verdict: a rewrite after the directory's files changes the key.
  for (const char* marker : kMarkersBeside) {
    struct stat m {};
    if (::stat((path.parent_path() / marker).c_str(), &m) == 0) key.mtime_ns = std::max(key.mtime_ns, MtimeNs(m));
  }
  return key;
}

namespace {
// The catalog's key as the version store's (a fixed name's versions compare with it).
std::optional<versions::ContentKey> ContentKeyOf(const fs::path& path, bool& is_directory) {
  auto key = CheckpointKey(path, is_directory);
  if (!key) return std::nullopt;
  return versions::ContentKey{key->size, key->mtime_ns, key->inode};
}
}  // namespace

Catalog::Catalog(CatalogOptions options, config::NamePattern pattern)
    : options_(std::move(options)), pattern_(std::move(pattern)), cache_(options_.dir, options_.cache_file) {
  cache_.Load();
  if (pattern_.fixed()) versions_.emplace(options_.dir, pattern_.text(), options_.keep, ContentKeyOf);
}

Result<Catalog> Catalog::Create(CatalogOptions options) {
  auto pattern = config::NamePattern::Parse(options.pattern);
  if (!pattern) return pattern.error();
  if (options.dir.empty()) return Error{"checkpoints.dir is not set"};
  options.dir = options.dir.lexically_normal();
  if (options.dir.string().size() > 1 && options.dir.string().back() == '/') options.dir = options.dir.parent_path();
  if (options.validator.root.empty()) options.validator.root = options.dir;
  if (options.validator.pool == nullptr) options.validator.pool = &HashPool::Shared();
  return Catalog(std::move(options), std::move(*pattern));
}

CatalogOptions CatalogOptionsFor(const config::JobConfig& job, bool acts) {
  const auto& c = job.checkpoints;
  CatalogOptions o;
  if (c.dir) o.dir = fs::absolute(*c.dir);
  o.pattern = c.pattern;
  o.validator = ValidatorOptionsFor(c);
  if (!job.telemetry.state_dir.empty()) {
    const bool finite = c.content == config::ContentCheck::kFinite;
    o.cache_file = job.telemetry.state_dir / std::string(finite ? kFiniteCacheFileName : kCacheFileName);
  }
  o.keep = c.keep;
  o.quarantine = acts && c.quarantine;
  if (acts) {
    o.latest_link = c.latest_link;
    o.rewrite_hints = c.rewrite_hints;
    o.judge_older = job.coordination.enabled();
    o.prune_at_selection = !job.coordination.enabled();
  }
  o.fence = ReadFence(job.telemetry.state_dir);
  return o;
}

Result<Catalog> Catalog::FromConfig(const config::JobConfig& job) {
  if (!job.checkpoints.dir) return Error{"checkpoints.dir is not set"};
  return Create(CatalogOptionsFor(job));
}

Result<std::vector<CatalogEntry>> Catalog::Scan() const {
  std::vector<CatalogEntry> entries;
  std::error_code ec;
  fs::directory_iterator it(options_.dir, ec);
  if (ec == std::errc::no_such_file_or_directory) return entries;
  if (ec) return Error{"cannot read checkpoint dir " + options_.dir.string() + ": " + ec.message()};
  for (; it != fs::directory_iterator(); it.increment(ec)) {
    if (ec) return Error{"cannot read checkpoint dir " + options_.dir.string() + ": " + ec.message()};
    const std::string name = it->path().filename().string();
    const auto step = pattern_.Match(name);
    if (!step || name == options_.latest_link) continue;
    CatalogEntry e;
    e.name = name;
    e.path = options_.dir / name;
    e.step = *step;
    auto key = CheckpointKey(e.path, e.is_directory);
    if (key) e.key = *key;
    else e.scan_error = key.error().message;
    if (versions_ && key) e.step = versions_->GenerationOf({e.key.size, e.key.mtime_ns, e.key.inode});
    entries.push_back(std::move(e));
  }
  std::sort(entries.begin(), entries.end(), [](const CatalogEntry& a, const CatalogEntry& b) {
    return a.step != b.step ? a.step > b.step : a.name > b.name;
  });
  return entries;
}

std::vector<fs::path> Catalog::TempEntries(std::uint64_t& bytes) const {
  std::vector<fs::path> found;
  std::error_code ec;
  fs::directory_iterator it(options_.dir, ec);
  for (; !ec && it != fs::directory_iterator(); it.increment(ec)) {
    const std::string name = it->path().filename().string();
    if (!config::IsTempName(name) || name.rfind(".spotvisor-", 0) == 0) continue;
    bool is_directory = false;
    if (auto key = CheckpointKey(it->path(), is_directory)) bytes += key->size;
    found.push_back(it->path());
  }
  std::sort(found.begin(), found.end());
  return found;
}

Verdict Catalog::Validate(const CatalogEntry& e) const {
  if (!e.scan_error.empty()) return Verdict{false, e.scan_error, ""};
  return ValidateCheckpoint(e.path, options_.validator);
}

void Catalog::Judge(std::vector<CatalogEntry>& entries, bool use_cache) {
  for (auto& e : entries) {
    if (use_cache && e.scan_error.empty()) {
      if (auto v = cache_.Find(e.name, e.key, options_.validator.level)) {
        e.verdict = std::move(*v);
        e.from_cache = true;
        continue;
      }
    }
    e.verdict = Validate(e);
    e.from_cache = false;
    if (e.scan_error.empty()) cache_.Put(e.name, e.key, options_.validator.level, *e.verdict);
  }
}

std::optional<std::string> Catalog::FencedBecause(const CatalogEntry& e) const {
  if (options_.fence.empty() || !e.scan_error.empty()) return std::nullopt;
  return options_.fence.Reason(ManifestEpoch(e.path, e.is_directory), e.step);
}

bool Catalog::PassOverFenced(const CatalogEntry& e, bool act, Selection& selection) const {
  auto why = FencedBecause(e);
  if (!why) return false;
  // Passed over unvalidated and left where it is: it need not be bad, and people may want it.
  if (act) {
    Log(LogLevel::kWarning, "event=checkpoint_fenced path=" + Quote(e.path.string()) +
                                " step=" + std::to_string(e.step) + " reason=" + Quote(*why));
  }
  selection.rejected.push_back(Rejection{e.path, *why, std::nullopt, /*fenced=*/true});
  return true;
}

Result<fs::path> Catalog::Quarantine(const CatalogEntry& e) const {
  const fs::path qdir = options_.dir / std::string(kQuarantineDir);
  std::error_code ec;
  fs::create_directories(qdir, ec);
  if (ec) return Error{"cannot create " + qdir.string() + ": " + ec.message()};
  fs::path target = qdir / e.name;
  for (int n = 1; fs::exists(fs::symlink_status(target, ec)); ++n) target = qdir / (e.name + "." + std::to_string(n));
  fs::rename(e.path, target, ec);
  if (ec) return Error{"cannot move " + e.path.string() + " into " + qdir.string() + ": " + ec.message()};
  if (!e.is_directory) {  // its sidecar manifest goes with it
    const fs::path sidecar = ManifestPathFor(e.path, false);
    if (fs::exists(fs::symlink_status(sidecar, ec))) {
      fs::rename(sidecar, ManifestPathFor(target, false), ec);
    }
  }
  if (auto st = SyncDirectory(qdir); !st) return st.error();
  if (auto st = SyncDirectory(options_.dir); !st) return st.error();
  return target;
}

// A cached bad verdict with an unchanged key is final; anything else is validated now (or
// was, moments ago in this same selection: `validated_now`). The verdict is cached.
Verdict Catalog::Judge(const CatalogEntry& e, bool act, const VerdictCache* validated_now) {
  const auto level = options_.validator.level;
  auto cached = e.scan_error.empty() ? cache_.Find(e.name, e.key, level) : std::nullopt;
  auto fresh = validated_now && e.scan_error.empty() ? validated_now->Find(e.name, e.key, level) : std::nullopt;
  const bool validate_now = !fresh && !(cached && !cached->good);
  const auto started = std::chrono::steady_clock::now();
  if (act && validate_now) {
    Log(LogLevel::kInfo,
        "event=checkpoint_validating path=" + Quote(e.path.string()) + " step=" + std::to_string(e.step));
  }
  Verdict v = fresh ? *fresh : validate_now ? Validate(e) : *cached;
  if (act && (validate_now || fresh)) {
    const auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - started);
    Log(LogLevel::kInfo, "event=checkpoint_validated path=" + Quote(e.path.string()) +
                             " step=" + std::to_string(e.step) + " verdict=" + (v.good ? "good" : "bad") +
                             " ms=" + std::to_string(ms.count()) +
                             (fresh ? " validated_by=\"this selection's mirror restore\"" : ""));
  }
  if (e.scan_error.empty()) cache_.Put(e.name, e.key, level, v);
  return v;
}

// A bad entry's rejection: quarantined (when `act` and the options say so) and logged.
Rejection Catalog::Reject(const CatalogEntry& e, bool act) {
  Rejection r{e.path, e.verdict->reason, std::nullopt};
  if (act && options_.quarantine) {
    auto moved = Quarantine(e);
    if (moved) {
      r.moved_to = *moved;
      cache_.Erase(e.name);
    } else {
      Log(LogLevel::kError, "event=checkpoint_quarantine_failed path=" + Quote(e.path.string()) +
                                " error=" + Quote(moved.error().message));
    }
  }
  if (act) {
    Log(LogLevel::kWarning, "event=checkpoint_rejected path=" + Quote(e.path.string()) +
                                " step=" + std::to_string(e.step) + " reason=" + Quote(e.verdict->reason) +
                                (r.moved_to ? " quarantined_to=" + Quote(r.moved_to->string()) : ""));
  }
  return r;
}

void Catalog::SayTempLeft(const Selection& selection) const {
  std::string names;
  for (std::size_t i = 0; i < selection.temp_left.size() && i < 5; ++i) {
    names += (i ? "," : "") + selection.temp_left[i].filename().string();
  }
  if (selection.temp_left.size() > 5) names += ",…";
  Log(LogLevel::kWarning, "event=checkpoint_temp_left dir=" + Quote(options_.dir.string()) +
                              " count=" + std::to_string(selection.temp_left.size()) +
                              " bytes=" + std::to_string(selection.temp_left_bytes) + " names=" + Quote(names) +
                              " note=\"half-written saves, never resumed from; safe to delete while no trainer runs\"");
}

// The good ones among `older` (older than the chosen one), by the verdicts already held
// (retention erased its deletions); with judge_older, the ones without a verdict are
// judged now (once: the cache keeps it).
void Catalog::AddOlderGood(std::span<CatalogEntry> older, bool act, Selection& selection) {
  for (const auto& e : older) {
    if (!e.scan_error.empty() || FencedBecause(e)) continue;
    auto v = cache_.Find(e.name, e.key, options_.validator.level);
    if (!v && options_.judge_older) {
      v = Validate(e);
      cache_.Put(e.name, e.key, options_.validator.level, *v);
      if (act) {
        Log(LogLevel::kInfo, "event=checkpoint_validated path=" + Quote(e.path.string()) +
                                 " step=" + std::to_string(e.step) + " verdict=" + (v->good ? "good" : "bad") +
                                 " for=\"the group: every good step is offered\"");
      }
    }
    if (v && v->good) selection.good.push_back(ResumePoint{e.path, e.step});
  }
}

Result<Selection> Catalog::Select(bool act, const VerdictCache* validated_now) {
  auto entries = Scan();
  if (!entries) return entries.error();
  Selection selection;
  const CatalogEntry* chosen = nullptr;
  for (auto& e : *entries) {
    if (PassOverFenced(e, act, selection)) continue;
    e.verdict = Judge(e, act, validated_now);
    if (e.verdict->good) {
      chosen = &e;
      break;
    }
    selection.rejected.push_back(Reject(e, act));
  }
  if (chosen == nullptr && act && versions_) {
    if (auto restored = RestoreNewestVersion(selection)) {
      entries->assign(1, std::move(*restored));  // the bad one is gone: replaced or quarantined
      chosen = &entries->front();
    }
  }
  if (chosen != nullptr) selection.chosen = ResumePoint{chosen->path, chosen->step};
  // Only before a start: listings (the mirror's every scan among them) skip the walk.
  if (act) selection.temp_left = TempEntries(selection.temp_left_bytes);
  if (!selection.temp_left.empty()) SayTempLeft(selection);
  if (act && chosen != nullptr) {
    if (auto st = AfterChoice(*chosen, !selection.rejected.empty()); !st) {
      Log(LogLevel::kError, "event=checkpoint_upkeep_failed error=" + Quote(st.error().message));
    }
  }
  if (chosen != nullptr) {
    selection.good.push_back(*selection.chosen);
    const std::size_t after = static_cast<std::size_t>(chosen - entries->data()) + 1;
    AddOlderGood(std::span<CatalogEntry>(*entries).subspan(after), act, selection);
  }
  if (!act) return selection;
  if (auto st = cache_.Save(); !st)
    Log(LogLevel::kWarning, "event=checkpoint_cache_not_saved error=" + Quote(st.error().message));
  return selection;
}

CatalogEntry Catalog::EntryOf(const versions::KeptVersion& version) const {
  CatalogEntry e;
  e.name = (fs::path(std::string(versions::kVersionsDir)) / version.path.parent_path().filename() / pattern_.text())
               .string();
  e.path = version.path;
  e.step = version.generation;
  e.is_directory = version.is_directory;
  e.key = CacheKey{version.key.size, version.key.mtime_ns, version.key.inode};
  return e;
}

std::optional<CatalogEntry> Catalog::RestoreNewestVersion(const Selection& selection) {
  const auto& rejected = selection.rejected;
  const std::string replaced = rejected.empty()            ? "nothing: the file was missing"
                               : rejected.front().moved_to ? rejected.front().moved_to->string()
                                                           : "a bad file (checkpoints.quarantine is off)";
  for (const auto& version : versions_->List()) {
    const Verdict v = Validate(EntryOf(version));
    if (!v.good) {
      Log(LogLevel::kWarning, "event=checkpoint_version_rejected path=" + Quote(version.path.string()) +
                                  " generation=" + std::to_string(version.generation) + " reason=" + Quote(v.reason));
      continue;
    }
    if (auto st = versions_->Restore(version); !st) {
      Log(LogLevel::kError, "event=checkpoint_version_restore_failed path=" + Quote(version.path.string()) +
                                " error=" + Quote(st.error().message));
      return std::nullopt;
    }
    auto entries = Scan();
    if (!entries || entries->empty() || !entries->front().scan_error.empty()) return std::nullopt;
    CatalogEntry e = std::move(entries->front());
    e.verdict = v;
    cache_.Put(e.name, e.key, options_.validator.level, v);
    Log(LogLevel::kWarning, "event=checkpoint_version_restored path=" + Quote(e.path.string()) +
                                " from=" + Quote(version.path.string()) + " step=" + std::to_string(e.step) +
                                " generation=" + std::to_string(version.generation) + " replaced=" + Quote(replaced));
    return e;
  }
  return std::nullopt;
}

Status Catalog::AfterChoice(const CatalogEntry& chosen, bool fell_back) {
  for (const auto& hint : ReadHints(options_.dir)) {
    if (!hint.parses || (hint.value != chosen.name && hint.value != std::to_string(chosen.step))) {
      Log(LogLevel::kInfo, "event=checkpoint_hint_disagrees file=" + Quote(hint.file.string()) +
                               " says=" + Quote(hint.value) + " chosen=" + Quote(chosen.name));
    }
  }
  if (fell_back && options_.rewrite_hints) {
    auto rewritten = RewriteHints(options_.dir, chosen.name, chosen.step);
    if (!rewritten) return rewritten.error();
    for (const auto& f : *rewritten) {
      Log(LogLevel::kInfo, "event=checkpoint_hint_rewritten file=" + Quote(f.string()) + " to=" + Quote(chosen.name));
    }
  }
  if (!options_.latest_link.empty()) {
    if (auto st = ReplaceSymlinkAtomically(options_.dir / options_.latest_link, chosen.name); !st) return st;
  }
  if (!options_.prune_at_selection) return Ok{};
  auto deleted = ApplyRetention();
  if (!deleted) return deleted.error();
  return Ok{};
}

Result<std::vector<fs::path>> Catalog::ApplyRetention(bool judged_only) {
  std::vector<fs::path> deleted;
  if (options_.keep <= 0) return deleted;
  auto entries = Scan();
  if (!entries) return entries.error();
  if (!judged_only) {
    Judge(*entries, /*use_cache=*/true);
  } else {
    for (auto& e : *entries) {
      if (e.scan_error.empty()) e.verdict = cache_.Find(e.name, e.key, options_.validator.level);
    }
  }
  // Good ones beyond the newest `keep` go, and so do fenced ones beyond the newest `keep` of
  // them (never resumed from, kept a while for people to look at: a flapping node's would
  // fill the dir). The fenced count apart, so they never push out the job's own.
  int good = 0, fenced = 0;
  for (const auto& e : *entries) {
    if (!e.verdict || !e.verdict->good) continue;
    const auto fenced_why = FencedBecause(e);
    if (++(fenced_why ? fenced : good) <= options_.keep) continue;
    if (auto why = options_.held ? options_.held(e) : std::nullopt) {
      if (said_held_.insert(e.name).second) {
        Log(LogLevel::kWarning, "event=retention_held path=" + Quote(e.path.string()) +
                                    " step=" + std::to_string(e.step) + " keep=" + std::to_string(options_.keep) +
                                    " good=" + std::to_string(good) + " why=" + Quote(*why));
      }
      continue;
    }
    std::error_code ec;
    fs::remove_all(e.path, ec);
    if (ec) return Error{"retention: cannot delete " + e.path.string() + ": " + ec.message()};
    if (!e.is_directory) fs::remove(ManifestPathFor(e.path, false), ec);
    cache_.Erase(e.name);
    Log(LogLevel::kInfo, "event=checkpoint_deleted path=" + Quote(e.path.string()) + " step=" + std::to_string(e.step) +
                             " keep=" + std::to_string(options_.keep) +
                             (fenced_why ? " fenced=" + Quote(*fenced_why) : std::string()));
    deleted.push_back(e.path);
  }
  if (!deleted.empty()) {
    if (auto st = SyncDirectory(options_.dir); !st) return st.error();
  }
  return deleted;
}

}  // namespace spotvisor::checkpoint

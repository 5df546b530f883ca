// The versions of a fixed-name checkpoint; see version_store.hpp. Invariant: a name
// v<generation> under .spotvisor-versions/ holds a whole, fsynced copy (made under a temp
// name and renamed); the file in place is only ever replaced by a rename.
#include "spotvisor/versions/version_store.hpp"

#include <fcntl.h>
#include <stdio.h>
#include <sys/stat.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <utility>

#include "spotvisor/util/atomic_file.hpp"

namespace spotvisor::versions {
namespace {

namespace fs = std::filesystem;

// The generation in a version directory's name "v<digits>"; nullopt for anything else.
std::optional<std::uint64_t> GenerationIn(const std::string& dir_name) {
  if (dir_name.size() < 2 || dir_name[0] != 'v' || dir_name.size() > 20) return std::nullopt;
  std::uint64_t g = 0;
  for (std::size_t i = 1; i < dir_name.size(); ++i) {
    if (dir_name[i] < '0' || dir_name[i] > '9') return std::nullopt;
    g = g * 10 + static_cast<std::uint64_t>(dir_name[i] - '0');
  }
  return g;
}

bool SameContent(const ContentKey& a, const ContentKey& b) { return a.size == b.size && a.mtime_ns == b.mtime_ns; }

}  // namespace

VersionStore::VersionStore(fs::path checkpoint_dir, std::string name, int keep, KeyOf key_of)
    : checkpoint_dir_(std::move(checkpoint_dir)),
      name_(std::move(name)),
      in_place_(checkpoint_dir_ / name_),
      dir_(checkpoint_dir_ / std::string(kVersionsDir)),
      keep_(keep > 0 ? keep : kDefaultFixedKeep),
      key_of_(std::move(key_of)) {}

std::vector<KeptVersion> VersionStore::List() const {
  std::vector<KeptVersion> versions;
  std::error_code ec;
  for (fs::directory_iterator it(dir_, ec), end; !ec && it != end; it.increment(ec)) {
    const auto generation = GenerationIn(it->path().filename().string());
    if (!generation) continue;
    KeptVersion v;
    v.path = it->path() / name_;
    v.generation = *generation;
    auto key = key_of_(v.path, v.is_directory);
    if (!key) continue;  // a version dir without its copy: not a version
    v.key = *key;
    versions.push_back(std::move(v));
  }
  std::sort(versions.begin(), versions.end(),
            [](const KeptVersion& a, const KeptVersion& b) { return a.generation > b.generation; });
  return versions;
}

std::uint64_t VersionStore::GenerationOf(const ContentKey& key) const {
  const auto versions = List();
  for (const auto& v : versions) {
    if (SameContent(v.key, key)) return v.generation;
  }
  return versions.empty() ? 1 : versions.front().generation + 1;
}

Result<KeepOutcome> VersionStore::Keep(const ContentKey& judged, const std::function<bool()>& abandon) {
  KeepOutcome out;
  const auto versions = List();
  for (const auto& v : versions) {
    if (!SameContent(v.key, judged)) continue;
    out.kind = KeepOutcome::Kind::kAlreadyKept;
    out.version = v;
    return out;
  }
  const std::uint64_t generation = versions.empty() ? 1 : versions.front().generation + 1;
  const fs::path final_dir = dir_ / ("v" + std::to_string(generation));
  const fs::path temp_dir = dir_ / (".tmp-v" + std::to_string(generation));
  std::error_code ec;
  fs::create_directories(dir_, ec);
  if (ec) return Error{"cannot create " + dir_.string() + ": " + ec.message()};
  fs::remove_all(temp_dir, ec);  // an interrupted copy of an earlier run
  if (::mkdir(temp_dir.c_str(), 0755) != 0)
    return Error{"cannot create " + temp_dir.string() + ": " + std::strerror(errno)};
  auto cloned = CloneTree(in_place_, temp_dir / name_, abandon);
  bool is_directory = false;
  auto after = key_of_(in_place_, is_directory);
  if (!cloned || !after || *after != judged) {
    fs::remove_all(temp_dir, ec);
    if (!cloned && cloned.error().message.rfind(kCloneAbandoned, 0) == 0) {
      out.kind = KeepOutcome::Kind::kAbandoned;
      return out;
    }
    if (!cloned && after && *after == judged) return cloned.error();
    out.kind = KeepOutcome::Kind::kChanged;  // a new save began: the watcher judges it anew
    return out;
  }
  if (auto st = SyncDirectory(temp_dir); !st) return st.error();
  fs::remove_all(final_dir, ec);  // a v<N> without its copy (List passed it over)
  fs::rename(temp_dir, final_dir, ec);
  if (ec) return Error{"cannot rename " + temp_dir.string() + " to " + final_dir.string() + ": " + ec.message()};
  if (auto st = SyncDirectory(dir_); !st) return st.error();
  out.stats = *cloned;
  out.version = KeptVersion{final_dir / name_, generation, judged, is_directory};
  if (auto st = DeleteBeyondKeep(out.deleted); !st) return st.error();
  return out;
}

Status VersionStore::DeleteBeyondKeep(std::vector<fs::path>& deleted) const {
  auto versions = List();
  std::reverse(versions.begin(), versions.end());  // oldest first
  for (std::size_t i = 0; i + static_cast<std::size_t>(keep_) < versions.size(); ++i) {
    std::error_code ec;
    fs::remove_all(versions[i].path.parent_path(), ec);
    if (ec) return Error{"cannot delete the kept version " + versions[i].path.string() + ": " + ec.message()};
    deleted.push_back(versions[i].path);
  }
  if (!deleted.empty()) return SyncDirectory(dir_);
  return Ok{};
}

Status VersionStore::Restore(const KeptVersion& version) const {
  const fs::path temp = checkpoint_dir_ / (".spotvisor-restore-tmp-" + name_);
  std::error_code ec;
  fs::remove_all(temp, ec);
  auto cloned = CloneTree(version.path, temp, nullptr);
  if (!cloned) return Error{"cannot put back " + version.path.string() + ": " + cloned.error().message};
  // A directory in place cannot be renamed over: the two names are exchanged, then the
  // old one (now at the temp name) goes.
  const bool exchange = fs::is_directory(fs::symlink_status(in_place_, ec));
  const unsigned flags = exchange ? RENAME_EXCHANGE : 0;
  if (::renameat2(AT_FDCWD, temp.c_str(), AT_FDCWD, in_place_.c_str(), flags) != 0) {
    const Error e{"cannot rename " + temp.string() + " over " + in_place_.string() + ": " + std::strerror(errno)};
    fs::remove_all(temp, ec);
    return e;
  }
  if (exchange) fs::remove_all(temp, ec);
  return SyncDirectory(checkpoint_dir_);
}

}  // namespace spotvisor::versions

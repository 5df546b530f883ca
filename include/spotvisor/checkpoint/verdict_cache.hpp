// Verdicts remembered between runs, in the job's state dir (checkpoint-cache.tsv), keyed
// by (name, size, newest mtime, inode) so that any change to a checkpoint invalidates its
// entry. Serves listings and retention only: a resume always re-validates. Not thread-safe;
// owned by one Catalog call at a time.
#pragma once

#include <cstdint>
#include <filesystem>
#include <map>
#include <optional>
#include <string>

#include "spotvisor/checkpoint/validator.hpp"
#include "spotvisor/util/result.hpp"

namespace spotvisor::checkpoint {

struct CacheKey {
  std::uint64_t size = 0;
  std::int64_t mtime_ns = 0;
  std::uint64_t inode = 0;
  bool operator==(const CacheKey&) const = default;
};

// The key of a checkpoint file or directory (every file's size, the newest mtime, the top
// inode; a framework's marker beside a directory counts in its mtime). Never follows
// symlinks inside a directory. Defined with the catalog, its first user.
Result<CacheKey> CheckpointKey(const std::filesystem::path& path, bool& is_directory);

class VerdictCache {
 public:
  // An empty cache for checkpoints in `dir`, stored at `file` (empty path: memory only).
  VerdictCache(std::filesystem::path dir, std::filesystem::path file);

  // Reads the file; a missing, unreadable or foreign (other dir) file gives an empty
  // cache, never an error: the cache is only an optimisation.
  void Load();
  // Writes the file atomically, creating its directory.
  Status Save() const;

  // The verdict for `name` when the key matches and the stored level answers `level`
  // (a good verdict at a deeper level, a bad one at a shallower or equal level).
  std::optional<Verdict> Find(const std::string& name, const CacheKey& key, config::ValidateLevel level) const;
  void Put(const std::string& name, const CacheKey& key, config::ValidateLevel level, const Verdict& verdict);
  void Erase(const std::string& name) { entries_.erase(name); }
  std::size_t size() const { return entries_.size(); }

 private:
  struct Entry {
    CacheKey key;
    config::ValidateLevel level;
    Verdict verdict;
  };
  std::filesystem::path dir_;             // the checkpoints dir the names live in
  std::filesystem::path file_;            // where the cache is stored
  std::map<std::string, Entry> entries_;  // by checkpoint name
};

}  // namespace spotvisor::checkpoint

// The versions spotvisor keeps of a fixed-name checkpoint (checkpoints.pattern without
// {step}, such as ckpt.pt, which the trainer saves over in place): whole copies under
// <checkpoints.dir>/.spotvisor-versions/v<generation>/<name>, reflinked where the
// filesystem can. The generation counts the versions of the job (1, 2, ...) and is the
// checkpoint's step; a version holds the size and mtime of the content it copied, which is
// how the file in place is matched to its version. Blocking; one thread at a time (the
// checkpoints.dir keeper during `run`, or a command).
#pragma once

#include <cstdint>
#include <filesystem>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "spotvisor/util/result.hpp"
#include "spotvisor/versions/clone_tree.hpp"

namespace spotvisor::versions {

// What identifies a checkpoint's content without reading it: every file's size, the newest
// mtime, the top inode (the catalog's cache key). A version matches the file in place by
// size and mtime; its inode is its own.
struct ContentKey {
  std::uint64_t size = 0;
  std::int64_t mtime_ns = 0;
  std::uint64_t inode = 0;
  bool operator==(const ContentKey&) const = default;
};

// Measures a checkpoint file or directory (sets `is_directory`); none when it cannot.
using KeyOf = std::function<std::optional<ContentKey>(const std::filesystem::path& path, bool& is_directory)>;

inline constexpr std::string_view kVersionsDir = ".spotvisor-versions";
// checkpoints.keep: 0 means "keep all" for names with {step}; a fixed name keeps this many
// versions then (each is a whole copy of the checkpoint).
inline constexpr int kDefaultFixedKeep = 2;

struct KeptVersion {
  std::filesystem::path path;    // <checkpoints.dir>/.spotvisor-versions/v<generation>/<name>
  std::uint64_t generation = 0;  // 1 for the job's first version
  ContentKey key;                // size (all files), newest mtime (the copied content's), inode
  bool is_directory = false;
};

struct KeepOutcome {
  enum class Kind {
    kKept,         // a new version was made
    kAlreadyKept,  // a version with this content's size and mtime exists
    kAbandoned,    // a byte copy was asked to give way (a stop is on); try again later
    kChanged,      // the file in place changed while it was copied (a new save began)
  };
  Kind kind = Kind::kKept;
  KeptVersion version;                         // kKept, kAlreadyKept
  CloneStats stats;                            // kKept
  std::vector<std::filesystem::path> deleted;  // kKept: versions beyond keep, oldest first
};

class VersionStore {
 public:
  // `checkpoint_dir` absolute; `name` the fixed name; `keep` = checkpoints.keep (0: the
  // default above); `key_of` the catalog's measure, so that keys compare with its keys.
  VersionStore(std::filesystem::path checkpoint_dir, std::string name, int keep, KeyOf key_of);

  // Newest generation first. Half-made versions (temp names) are not listed.
  std::vector<KeptVersion> List() const;
  // The generation of content with this key: its version's when one is kept, else one
  // past the newest (content not kept yet is newer than every version of it).
  std::uint64_t GenerationOf(const ContentKey& key) const;

  // Keeps a version of the entry in place, judged good at `judged` (its key then), unless
  // one is kept already; deletes the oldest versions beyond keep. `abandon` as CloneTree's.
  Result<KeepOutcome> Keep(const ContentKey& judged, const std::function<bool()>& abandon);
  // Puts `version` back in place: a clone under a temp name in checkpoints.dir, fsynced,
  // renamed over the fixed name, the directory fsynced. The clone keeps the version's mtime.
  Status Restore(const KeptVersion& version) const;

  const std::filesystem::path& in_place() const { return in_place_; }
  const std::filesystem::path& dir() const { return dir_; }
  int keep() const { return keep_; }

 private:
  Status DeleteBeyondKeep(std::vector<std::filesystem::path>& deleted) const;

  std::filesystem::path checkpoint_dir_;  // checkpoints.dir
  std::string name_;                      // the fixed name
  std::filesystem::path in_place_;        // checkpoint_dir_ / name_
  std::filesystem::path dir_;             // checkpoint_dir_ / kVersionsDir
  int keep_;                              // > 0
  KeyOf key_of_;                          // the catalog's measure
};

}  // namespace spotvisor::versions

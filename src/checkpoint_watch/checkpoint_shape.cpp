// Checkpoint shapes by statx; see checkpoint_shape.hpp. Metadata only: nothing here reads
// a checkpoint's bytes.
#include "spotvisor/checkpoint_watch/checkpoint_shape.hpp"

#include <fcntl.h>
#include <sys/stat.h>

#include <algorithm>

namespace spotvisor::checkpoint_watch {
namespace {

constexpr int kMaxFilesWalked = 100000;

std::int64_t Ms(const statx_timestamp& t) { return t.tv_sec * 1000 + t.tv_nsec / 1000000; }

bool Stat(const std::filesystem::path& p, struct statx& st) {
  return statx(AT_FDCWD, p.c_str(), AT_SYMLINK_NOFOLLOW, STATX_SIZE | STATX_MTIME | STATX_BTIME | STATX_TYPE, &st) == 0;
}

void Add(CheckpointShape& shape, const struct statx& st, bool& birth_known) {
  shape.bytes += st.stx_size;
  shape.mtime_ms = std::max(shape.mtime_ms, Ms(st.stx_mtime));
  if (st.stx_mask & STATX_BTIME) {
    const auto b = Ms(st.stx_btime);
    shape.birth_ms = shape.birth_ms ? std::min(*shape.birth_ms, b) : b;
  } else {
    birth_known = false;
  }
}

}  // namespace

std::optional<CheckpointShape> MeasureCheckpoint(const std::filesystem::path& path) {
  struct statx st {};
  if (!Stat(path, st)) return std::nullopt;
  CheckpointShape shape;
  bool birth_known = true;
  if (!S_ISDIR(st.stx_mode)) {
    Add(shape, st, birth_known);
  } else {
    std::error_code ec;
    int walked = 0;
    for (auto it = std::filesystem::recursive_directory_iterator(path, ec);
         !ec && it != std::filesystem::recursive_directory_iterator() && ++walked < kMaxFilesWalked; it.increment(ec)) {
      struct statx f {};
      if (Stat(it->path(), f) && S_ISREG(f.stx_mode)) Add(shape, f, birth_known);
    }
    if (ec) return std::nullopt;
  }
  if (!birth_known) shape.birth_ms.reset();
  return shape;
}

}  // namespace spotvisor::checkpoint_watch

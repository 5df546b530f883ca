// Reflink-or-copy of a checkpoint tree; see clone_tree.hpp. Invariant: on any failure
// nothing is left at the target (the caller renames a finished clone into place).
#include "spotvisor/versions/clone_tree.hpp"

#include <fcntl.h>
#include <linux/fs.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <vector>

#include "spotvisor/util/atomic_file.hpp"
#include "spotvisor/util/copy_symlink.hpp"
#include "spotvisor/util/unique_fd.hpp"

namespace spotvisor::versions {
namespace {

namespace fs = std::filesystem;
constexpr std::size_t kCloneChunk = 64u << 20;  // between two looks at `abandon`

using util::ErrnoText;
using util::UniqueFd;

Error Abandoned(const fs::path& from) { return Error{std::string(kCloneAbandoned) + " copying " + from.string()}; }

// read/write for filesystems where copy_file_range cannot (another filesystem, old kernel).
Status ReadWriteCopy(int in, int out, const fs::path& from, std::uint64_t& done, const std::function<bool()>& abandon) {
  std::vector<char> buf(1 << 20);
  for (std::size_t since_look = 0;;) {
    if (since_look >= kCloneChunk) {
      if (abandon && abandon()) return Abandoned(from);
      since_look = 0;
    }
    const ssize_t n = ::read(in, buf.data(), buf.size());
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return Error{ErrnoText("cannot read", from)};
    if (n == 0) return Ok{};
    for (ssize_t w = 0; w < n;) {
      const ssize_t m = ::write(out, buf.data() + w, static_cast<std::size_t>(n - w));
      if (m < 0 && errno == EINTR) continue;
      if (m < 0) return Error{ErrnoText("cannot write a copy of", from)};
      w += m;
    }
    done += static_cast<std::uint64_t>(n);
    since_look += static_cast<std::size_t>(n);
  }
}

// The bytes of `in` into `out`: copy_file_range in chunks (in the kernel), else read/write.
Status CopyBytes(int in, int out, const fs::path& from, std::uint64_t& done, const std::function<bool()>& abandon) {
  for (;;) {
    if (abandon && abandon()) return Abandoned(from);
    const ssize_t n = ::copy_file_range(in, nullptr, out, nullptr, kCloneChunk, 0);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && done == 0 && (errno == EXDEV || errno == ENOSYS || errno == EINVAL || errno == EOPNOTSUPP)) {
      return ReadWriteCopy(in, out, from, done, abandon);
    }
    if (n < 0) return Error{ErrnoText("cannot copy", from)};
    if (n == 0) return Ok{};
    done += static_cast<std::uint64_t>(n);
  }
}

Status CloneFile(const fs::path& from, const fs::path& to, const struct stat& st, const std::function<bool()>& abandon,
                 CloneStats& stats) {
  UniqueFd in(::open(from.c_str(), O_RDONLY | O_CLOEXEC));
  if (in.get() < 0) return Error{ErrnoText("cannot open", from)};
  UniqueFd out(::open(to.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, st.st_mode & 0777));
  if (out.get() < 0) return Error{ErrnoText("cannot create", to)};
  if (::ioctl(out.get(), FICLONE, in.get()) != 0) {  // no reflink here: the bytes themselves
    std::uint64_t copied = 0;
    if (Status s = CopyBytes(in.get(), out.get(), from, copied, abandon); !s) return s;
    stats.copied_bytes += copied;
  }
  // The source's mtime: a version is known by its size and mtime (the inode differs).
  const struct timespec times[2] = {st.st_atim, st.st_mtim};
  if (::futimens(out.get(), times) != 0) return Error{ErrnoText("cannot set the mtime of", to)};
  if (::fsync(out.get()) != 0) return Error{ErrnoText("cannot fsync", to)};
  stats.bytes += static_cast<std::uint64_t>(st.st_size);
  ++stats.files;
  return Ok{};
}

Status CloneEntry(const fs::path& from, const fs::path& to, const std::function<bool()>& abandon, CloneStats& stats) {
  struct stat st {};
  if (::lstat(from.c_str(), &st) != 0) return Error{ErrnoText("cannot stat", from)};
  if (S_ISREG(st.st_mode)) return CloneFile(from, to, st, abandon, stats);
  if (S_ISLNK(st.st_mode)) return util::CopySymlink(from, to);
  if (!S_ISDIR(st.st_mode)) return Error{from.string() + ": neither a file, a directory nor a symlink"};
  if (::mkdir(to.c_str(), st.st_mode & 0777) != 0) return Error{ErrnoText("cannot create directory", to)};
  std::error_code ec;
  for (fs::directory_iterator it(from, ec), end; !ec && it != end; it.increment(ec)) {
    if (Status s = CloneEntry(it->path(), to / it->path().filename(), abandon, stats); !s) return s;
  }
  if (ec) return Error{"cannot list " + from.string() + ": " + ec.message()};
  const struct timespec times[2] = {st.st_atim, st.st_mtim};  // after its entries were made
  if (::utimensat(AT_FDCWD, to.c_str(), times, AT_SYMLINK_NOFOLLOW) != 0) {
    return Error{ErrnoText("cannot set the mtime of", to)};
  }
  return SyncDirectory(to);
}

}  // namespace

Result<CloneStats> CloneTree(const fs::path& from, const fs::path& to, const std::function<bool()>& abandon) {
  CloneStats stats;
  if (Status s = CloneEntry(from, to, abandon, stats); !s) {
    std::error_code ec;
    fs::remove_all(to, ec);
    return s.error();
  }
  return stats;
}

}  // namespace spotvisor::versions

// Verified, atomic tree copy; see tree_copy.hpp. Invariant: nothing under the final name
// is ever partial: a new copy replaces an old one by an atomic exchange of names.
#include "spotvisor/mirror/tree_copy.hpp"

#include <fcntl.h>
#include <stdio.h>
#include <sys/stat.h>
#include <unistd.h>
#include <xxhash.h>

#include <cerrno>
#include <cstring>
#include <memory>
#include <vector>

#include "spotvisor/util/atomic_file.hpp"
#include "spotvisor/util/copy_symlink.hpp"
#include "spotvisor/util/unique_fd.hpp"

namespace spotvisor::mirror {
namespace {

namespace fs = std::filesystem;
constexpr std::size_t kChunk = 1 << 20;

using util::ErrnoText;
using util::UniqueFd;

struct Hasher {
  Hasher() : state(XXH3_createState(), &XXH3_freeState) { XXH3_64bits_reset(state.get()); }
  void Update(const char* data, std::size_t n) { XXH3_64bits_update(state.get(), data, n); }
  XXH64_hash_t Digest() const { return XXH3_64bits_digest(state.get()); }
  std::unique_ptr<XXH3_state_t, decltype(&XXH3_freeState)> state;
};

Result<XXH64_hash_t> HashFile(const fs::path& path, const CopyControl& control) {
  UniqueFd in(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
  if (in.get() < 0) return Error{ErrnoText("cannot open for verification", path)};
  Hasher h;
  std::vector<char> buf(kChunk);
  for (;;) {
    if (control.stop.stop_requested()) return Error{"cancelled while verifying " + path.string()};
    const ssize_t n = ::read(in.get(), buf.data(), buf.size());
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return Error{ErrnoText("cannot read back", path)};
    if (n == 0) break;
    h.Update(buf.data(), static_cast<std::size_t>(n));
  }
  return h.Digest();
}

Status CopyFile(const fs::path& from, const fs::path& to, mode_t mode, const CopyControl& control, CopyStats& stats) {
  UniqueFd in(::open(from.c_str(), O_RDONLY | O_CLOEXEC));
  if (in.get() < 0) return Error{ErrnoText("cannot open", from)};
  UniqueFd out(::open(to.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, mode & 0777));
  if (out.get() < 0) return Error{ErrnoText("cannot create", to)};
  Hasher h;
  std::vector<char> buf(kChunk);
  for (;;) {
    if (control.stop.stop_requested()) return Error{"cancelled while copying " + from.string()};
    const ssize_t n = ::read(in.get(), buf.data(), buf.size());
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return Error{ErrnoText("cannot read", from)};
    if (n == 0) break;
    if (control.limiter) control.limiter->Acquire(static_cast<std::uint64_t>(n));
    h.Update(buf.data(), static_cast<std::size_t>(n));
    for (ssize_t done = 0; done < n;) {
      const ssize_t w = ::write(out.get(), buf.data() + done, static_cast<std::size_t>(n - done));
      if (w < 0 && errno == EINTR) continue;
      if (w < 0) return Error{ErrnoText("cannot write", to)};
      done += w;
    }
    stats.bytes += static_cast<std::uint64_t>(n);
  }
  if (::fsync(out.get()) != 0) return Error{ErrnoText("cannot fsync", to)};
  auto written = HashFile(to, control);
  if (!written) return written.error();
  if (*written != h.Digest()) return Error{"verification failed: " + to.string() + " differs from " + from.string()};
  ++stats.files;
  return Ok{};
}

Status CopyTree(const fs::path& from, const fs::path& to, const CopyControl& control, CopyStats& stats) {
  struct stat st {};
  if (::lstat(from.c_str(), &st) != 0) return Error{ErrnoText("cannot stat", from)};
  if (S_ISLNK(st.st_mode)) return util::CopySymlink(from, to);
  if (S_ISREG(st.st_mode)) return CopyFile(from, to, st.st_mode, control, stats);
  if (!S_ISDIR(st.st_mode)) return Error{from.string() + ": neither a file, a directory nor a symlink"};
  if (::mkdir(to.c_str(), 0755) != 0) return Error{ErrnoText("cannot create directory", to)};
  std::error_code ec;
  for (fs::directory_iterator it(from, ec), end; !ec && it != end; it.increment(ec)) {
    if (Status s = CopyTree(it->path(), to / it->path().filename(), control, stats); !s) return s;
  }
  if (ec) return Error{"cannot list " + from.string() + ": " + ec.message()};
  return SyncDirectory(to);
}

}  // namespace

Result<CopyStats> CopyVerified(const fs::path& source, const fs::path& target_dir, const std::string& name,
                               const CopyControl& control) {
  std::error_code ec;
  fs::create_directories(target_dir, ec);
  if (ec) return Error{"cannot create " + target_dir.string() + ": " + ec.message()};
  const fs::path temp = target_dir / (std::string(kTempPrefix) + name);
  const fs::path final_path = target_dir / name;
  fs::remove_all(temp, ec);
  CopyStats stats;
  if (Status s = CopyTree(source, temp, control, stats); !s) {
    fs::remove_all(temp, ec);
    return s.error();
  }
  // An existing copy of that name is swapped out atomically (RENAME_EXCHANGE): the name
  // never points at nothing or at something partial.
  const bool replacing = fs::exists(fs::symlink_status(final_path, ec));
  const unsigned flags = replacing ? RENAME_EXCHANGE : RENAME_NOREPLACE;
  if (::renameat2(AT_FDCWD, temp.c_str(), AT_FDCWD, final_path.c_str(), flags) != 0) {
    const Error e{ErrnoText("cannot rename into place:", final_path)};
    fs::remove_all(temp, ec);
    return e;
  }
  if (replacing) fs::remove_all(temp, ec);  // now the previous copy
  if (Status s = SyncDirectory(target_dir); !s) return s.error();
  return stats;
}

std::optional<std::uint64_t> TreeBytes(const fs::path& path) {
  std::error_code ec;
  const auto status = fs::symlink_status(path, ec);
  if (ec) return std::nullopt;
  if (fs::is_regular_file(status)) {
    const auto size = fs::file_size(path, ec);
    return ec ? std::nullopt : std::optional<std::uint64_t>(size);
  }
  if (!fs::is_directory(status)) return std::nullopt;
  std::uint64_t total = 0;
  for (fs::recursive_directory_iterator it(path, ec), end; !ec && it != end; it.increment(ec)) {
    if (it->is_regular_file(ec)) total += it->file_size(ec);
  }
  return ec ? std::nullopt : std::optional<std::uint64_t>(total);
}

int RemoveCopyLeftovers(const fs::path& dir) {
  int removed = 0;
  std::error_code ec;
  for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
    const std::string n = it->path().filename().string();
    if (n.rfind(kTempPrefix, 0) == 0) {
      std::error_code rm;
      fs::remove_all(it->path(), rm);
      if (!rm) ++removed;
    }
  }
  return removed;
}

}  // namespace spotvisor::mirror

// Temp + fsync + rename + fsync(dir); see atomic_file.hpp.
#include "spotvisor/util/atomic_file.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <string>

namespace spotvisor {
namespace {

Error Fail(const std::filesystem::path& path, const char* step, int err) {
  return Error{"cannot write " + path.string() + ": " + step + ": " + std::strerror(err)};
}

}  // namespace

Status SyncDirectory(const std::filesystem::path& dir) {
  const int fd = open(dir.empty() ? "." : dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return Fail(dir, "open directory", errno);
  const int rc = fsync(fd);
  const int err = errno;
  close(fd);
  if (rc != 0) return Fail(dir, "fsync directory", err);
  return Ok{};
}

Status WriteFileAtomically(const std::filesystem::path& path, std::string_view contents, Durability durability) {
  const auto dir = path.parent_path();
  const std::string tmp = (dir / ("." + path.filename().string() + ".tmp-" + std::to_string(getpid()))).string();
  const int fd = open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return Fail(path, "create temp file", errno);
  std::size_t done = 0;
  while (done < contents.size()) {
    const ssize_t n = write(fd, contents.data() + done, contents.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      const int err = errno;
      close(fd);
      unlink(tmp.c_str());
      return Fail(path, "write", err);
    }
    done += static_cast<std::size_t>(n);
  }
  if (durability == Durability::kDurable && fsync(fd) != 0) {
    const int err = errno;
    close(fd);
    unlink(tmp.c_str());
    return Fail(path, "fsync", err);
  }
  close(fd);
  if (rename(tmp.c_str(), path.c_str()) != 0) {
    const int err = errno;
    unlink(tmp.c_str());
    return Fail(path, "rename", err);
  }
  return durability == Durability::kDurable ? SyncDirectory(dir) : Status(Ok{});
}

}  // namespace spotvisor

namespace spotvisor {

Status AppendLineDurably(const std::filesystem::path& path, std::string_view line) {
  const int fd = open(path.c_str(), O_RDWR | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
  if (fd < 0) return Fail(path, "open for append", errno);
  // One writer per file (the job lock), so the size now is where this append starts.
  struct stat st {};
  if (fstat(fd, &st) != 0) {
    const int err = errno;
    close(fd);
    return Fail(path, "stat", err);
  }
  std::string data;
  char last = '\n';
  if (st.st_size > 0 && pread(fd, &last, 1, st.st_size - 1) == 1 && last != '\n') data = "\n";
  data += line;
  const ssize_t n = write(fd, data.data(), data.size());
  const int write_err = errno;
  if (n != static_cast<ssize_t>(data.size())) {
    if (n > 0 && ftruncate(fd, st.st_size) != 0) {
      // Cannot cut it back: the torn line is skipped by readers, the retry starts anew.
    }
    close(fd);
    return Fail(path, "append", n < 0 ? write_err : ENOSPC);
  }
  const int sync_rc = fdatasync(fd);
  const int sync_err = errno;
  close(fd);
  if (sync_rc != 0) return Fail(path, "fdatasync", sync_err);
  return Ok{};
}

}  // namespace spotvisor

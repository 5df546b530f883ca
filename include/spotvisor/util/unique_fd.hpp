// One owned file descriptor, closed when it goes, and the "<what> <path>: <strerror(errno)>"
// words a failed call on it gets: for the code that copies files byte by byte (the mirror's
// tree copy, a fixed-name checkpoint's versions).
#pragma once

#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <string>

namespace spotvisor::util {

class UniqueFd {
 public:
  explicit UniqueFd(int fd) : fd_(fd) {}
  ~UniqueFd() {
    if (fd_ >= 0) ::close(fd_);
  }
  UniqueFd(const UniqueFd&) = delete;
  UniqueFd& operator=(const UniqueFd&) = delete;
  int get() const { return fd_; }

 private:
  int fd_;  // owned; -1 when the open failed
};

// "<what> <path>: <strerror(errno)>", read at the call.
inline std::string ErrnoText(const std::string& what, const std::filesystem::path& path) {
  return what + " " + path.string() + ": " + std::strerror(errno);
}

}  // namespace spotvisor::util

// Secret files: open once, check the mode of what was opened (no check-then-open race),
// read a bounded amount, trim. See secret_file.hpp.
#include "spotvisor/util/secret_file.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>

namespace spotvisor {
namespace {

std::string Octal(mode_t mode) {
  char buf[8];
  std::snprintf(buf, sizeof buf, "%04o", static_cast<unsigned>(mode & 07777));
  return buf;
}

}  // namespace

Result<std::string> ReadSecretFile(const std::filesystem::path& path, std::string_view what, std::size_t max_kib) {
  const std::size_t max_bytes = max_kib * 1024;
  const std::string name = std::string(what) + " file " + path.string();
  const int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOCTTY | O_NONBLOCK);
  if (fd < 0) return Error{"cannot read the " + name + " (" + std::strerror(errno) + ")"};
  struct stat st {};
  if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    close(fd);
    return Error{"the " + name + " is not a regular file"};
  }
  if ((st.st_mode & 0066) != 0) {
    close(fd);
    return Error{"refusing the " + name + ": it is accessible by group or others (mode " + Octal(st.st_mode) +
                 "); run chmod 600 " + path.string()};
  }
  std::string content(max_bytes + 1, '\0');
  std::size_t used = 0;
  while (used < content.size()) {
    const ssize_t n = read(fd, content.data() + used, content.size() - used);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      const int err = errno;
      close(fd);
      return Error{"cannot read the " + name + " (" + std::strerror(err) + ")"};
    }
    if (n == 0) break;
    used += static_cast<std::size_t>(n);
  }
  close(fd);
  if (used > max_bytes) return Error{"the " + name + " is larger than " + std::to_string(max_kib) + " KiB"};
  content.resize(used);
  while (!content.empty() &&
         (content.back() == ' ' || content.back() == '\n' || content.back() == '\r' || content.back() == '\t')) {
    content.pop_back();
  }
  if (content.empty()) return Error{"the " + name + " is empty"};
  return content;
}

bool ConstantTimeEquals(std::string_view a, std::string_view b) {
  unsigned char diff = a.size() == b.size() ? 0 : 1;
  const std::size_t n = std::max(a.size(), b.size());
  for (std::size_t i = 0; i < n; ++i) {
    const unsigned char x = i < a.size() ? static_cast<unsigned char>(a[i]) : 0;
    const unsigned char y = i < b.size() ? static_cast<unsigned char>(b[i]) : 0;
    diff |= static_cast<unsigned char>(x ^ y);
  }
  return diff == 0;
}

}  // namespace spotvisor

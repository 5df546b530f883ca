// Atomic symlink replacement; see atomic_link.hpp. rename(2) over an existing link is
// atomic, so readers see the old target or the new one, never no link.
#include "spotvisor/checkpoint/atomic_link.hpp"

#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <string>

#include "spotvisor/util/atomic_file.hpp"

namespace spotvisor::checkpoint {

Status ReplaceSymlinkAtomically(const std::filesystem::path& link, const std::filesystem::path& target) {
  const auto temp =
      link.parent_path() / (".spotvisor-tmp-" + link.filename().string() + "." + std::to_string(::getpid()));
  ::unlink(temp.c_str());
  if (::symlink(target.c_str(), temp.c_str()) != 0) {
    return Error{"cannot create symlink " + temp.string() + ": " + std::strerror(errno)};
  }
  if (::rename(temp.c_str(), link.c_str()) != 0) {
    Error e{"cannot rename " + temp.string() + " to " + link.string() + ": " + std::strerror(errno)};
    ::unlink(temp.c_str());
    return e;
  }
  return SyncDirectory(link.parent_path());
}

}  // namespace spotvisor::checkpoint

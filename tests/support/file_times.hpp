// A file's mtime set to a given wall time, to the nanosecond: how an in-process test in
// virtual time (virtual_clock.hpp) makes a trainer's heartbeat or checkpoint look written
// "now" on the test's clock, whatever the machine's clock says.
#pragma once

#include <fcntl.h>
#include <sys/stat.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <stdexcept>
#include <string>

#include "spotvisor/util/clock.hpp"

namespace spotvisor::testing {

// Sets both atime and mtime of `path` (which must exist) to `when`.
inline void SetMtime(const std::filesystem::path& path, WallTime when) {
  const auto ns = std::chrono::duration_cast<std::chrono::nanoseconds>(when.time_since_epoch()).count();
  const timespec t{static_cast<time_t>(ns / 1'000'000'000), static_cast<long>(ns % 1'000'000'000)};
  const timespec times[2] = {t, t};
  if (::utimensat(AT_FDCWD, path.c_str(), times, 0) != 0) {
    throw std::runtime_error("utimensat " + path.string() + ": " + std::strerror(errno));
  }
}

// Writes `text` to `path` (replacing it) and dates it `when`.
inline void WriteFileAt(const std::filesystem::path& path, const std::string& text, WallTime when) {
  std::ofstream(path, std::ios::binary | std::ios::trunc) << text;
  SetMtime(path, when);
}

}  // namespace spotvisor::testing

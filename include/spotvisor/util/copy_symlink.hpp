// A symlink copied as a symlink (its target as written, never followed): for the code that
// copies checkpoint trees (the mirror's tree copy, a fixed-name checkpoint's versions).
#pragma once

#include <filesystem>
#include <system_error>

#include "spotvisor/util/result.hpp"

namespace spotvisor::util {

inline Status CopySymlink(const std::filesystem::path& from, const std::filesystem::path& to) {
  std::error_code ec;
  const auto target = std::filesystem::read_symlink(from, ec);
  if (!ec) std::filesystem::create_symlink(target, to, ec);
  if (ec) return Error{"cannot copy the symlink " + from.string() + ": " + ec.message()};
  return Ok{};
}

}  // namespace spotvisor::util

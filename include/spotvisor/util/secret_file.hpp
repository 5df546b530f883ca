// Reading a secret (the metrics bearer token, a hook's credential) from a file. A missing,
// empty, oversized or group/world-accessible file is refused with a message that names the
// file and never its content. Any thread.
#pragma once

#include <cstddef>
#include <filesystem>
#include <string>
#include <string_view>

#include "spotvisor/util/result.hpp"

namespace spotvisor {

// The file's content without trailing whitespace. `what` names the secret in messages
// ("metrics token"). Refused: not a regular file, mode with any group/other read or write
// bit, empty after trimming, larger than `max_kib` KiB.
Result<std::string> ReadSecretFile(const std::filesystem::path& path, std::string_view what, std::size_t max_kib = 4);

// Compares in time independent of where the first difference is.
bool ConstantTimeEquals(std::string_view a, std::string_view b);

}  // namespace spotvisor

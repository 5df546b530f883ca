// Paths relative to a checkpoint's root ("model/shard-00001.safetensors"), as the
// checkpoint module keeps them: '/'-separated, no leading slash.
#pragma once

#include <string>

namespace spotvisor::checkpoint {

// "a/b/c" -> "a/b"; "c" -> "".
inline std::string RelParent(const std::string& rel) {
  const auto slash = rel.rfind('/');
  return slash == std::string::npos ? "" : rel.substr(0, slash);
}

}  // namespace spotvisor::checkpoint

// libFuzzer target: the manifest parser (JSON, format/version/algorithm, paths, sizes,
// hashes) and the path-safety rule. A parsed manifest must never hold an unsafe path.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include "spotvisor/checkpoint/manifest.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace spotvisor::checkpoint;
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  auto m = ParseManifest(text, "fuzz.json");
  if (m) {
    for (const auto& f : m->files) {
      if (!IsSafeRelativePath(f.path)) std::abort();
    }
    auto again = ParseManifest(SerializeManifest(*m), "round-trip");
    if (!again || again->files.size() != m->files.size()) std::abort();
  }
  (void)IsSafeRelativePath(text);
  return 0;
}

// libFuzzer target: ParseRfc1123 (Azure `NotBefore`) never crashes, and whatever it
// accepts prints and parses back to the same instant.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include "spotvisor/preemption/time_format.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace spotvisor::preemption;
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  const auto parsed = ParseRfc1123(text);
  if (!parsed) return 0;
  const auto again = ParseRfc1123(FormatRfc1123(*parsed));
  if (!again || *again != *parsed) std::abort();
  return 0;
}

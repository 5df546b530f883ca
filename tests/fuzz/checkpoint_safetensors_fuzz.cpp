// libFuzzer target: safetensors validation (length prefix, JSON header, tensor rules,
// tiling, file size) on arbitrary bytes. Must never crash or over-allocate.
#include <cstddef>
#include <cstdint>

#include "spotvisor/checkpoint/byte_source.hpp"
#include "spotvisor/checkpoint/safetensors_check.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace spotvisor::checkpoint;
  MemorySource src({reinterpret_cast<const std::byte*>(data), size}, "fuzz.safetensors");
  (void)CheckSafetensors(src);
  (void)CheckSafetensorsHeader({reinterpret_cast<const char*>(data), size}, size + 8, "fuzz-header");
  return 0;
}

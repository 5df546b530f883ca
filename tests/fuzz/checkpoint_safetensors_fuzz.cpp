// libFuzzer target: safetensors validation (length prefix, JSON header, tensor rules,
// tiling, file size) and the content check's scan of its tensors on arbitrary bytes. Must
// never crash or over-allocate.
#include <cstddef>
#include <cstdint>

#include "spotvisor/checkpoint/byte_source.hpp"
#include "spotvisor/checkpoint/content_check.hpp"
#include "spotvisor/checkpoint/safetensors_check.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace spotvisor::checkpoint;
  MemorySource src({reinterpret_cast<const std::byte*>(data), size}, "fuzz.safetensors");
  if (CheckSafetensors(src)) {
    if (auto tensors = SafetensorsTensors(src)) (void)ReadAndJudge(src, FiniteScan(std::move(*tensors)), nullptr);
  }
  (void)CheckSafetensorsHeader({reinterpret_cast<const char*>(data), size}, size + 8, "fuzz-header");
  return 0;
}

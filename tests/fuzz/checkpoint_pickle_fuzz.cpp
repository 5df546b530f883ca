// libFuzzer target: the pickle reader (every opcode, memo, marks, limits) and the legacy
// torch.save walk (five pickles, then the storages they name) on arbitrary bytes. Must
// never crash, hang or read out of bounds.
#include <cstddef>
#include <cstdint>

#include "spotvisor/checkpoint/byte_source.hpp"
#include "spotvisor/checkpoint/pickle.hpp"
#include "spotvisor/checkpoint/torch_pickles.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace spotvisor::checkpoint;
  MemorySource src({reinterpret_cast<const std::byte*>(data), size}, "fuzz.pkl");
  PickleLimits limits;
  limits.max_nodes = 100000;
  limits.max_text_bytes = 1 << 20;
  std::uint64_t end = 0;
  if (auto tree = ReadPickle(src, 0, size, &end, limits)) {
    for (PickleTree::Ref r = 0; r < tree->size(); ++r) {
      (void)tree->Get(r, "storage_data");
      (void)tree->CallName(r);
    }
  }
  (void)CheckTorchLegacy(src, true, nullptr);
  return 0;
}

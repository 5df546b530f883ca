// libFuzzer target: the torch.save ZIP walker (end records, central directory, local
// headers, data descriptors, torch records, CRCs), the content check's walk of data.pkl to
// the tensors and their scan, and the DCP back-to-back walk on arbitrary bytes. Must never
// crash, hang or read out of bounds.
#include <cstddef>
#include <cstdint>

#include "spotvisor/checkpoint/byte_source.hpp"
#include "spotvisor/checkpoint/content_check.hpp"
#include "spotvisor/checkpoint/zip_archive.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace spotvisor::checkpoint;
  MemorySource src({reinterpret_cast<const std::byte*>(data), size}, "fuzz.pt");
  std::uint64_t end = size;
  for (int archives = 0; archives < 8 && end > 0; ++archives) {
    auto a = ReadZipIndex(src, end, archives == 0);
    if (!a) break;
    if (CheckZipLayout(src, *a)) {
      if (CheckTorchRecords(src, *a)) {
        if (auto tensors = TorchArchiveTensors(src, *a, "")) {
          const FiniteScan scan(std::move(*tensors));
          (void)VerifyZipCrcs(src, *a, nullptr, scan.visitor());
          (void)scan.Verdict(src);
        }
      }
      (void)VerifyZipCrcs(src, *a, nullptr);
    }
    if (a->start >= end) break;
    end = a->start;
  }
  return 0;
}

// The content check (checkpoints.content: finite): no floating-point tensor of a checkpoint
// holds NaN or ±Inf. Tensors are found through the format's own index — the rebuild calls
// and storages of a torch.save archive's data.pkl (also each DCP item), the header of a
// safetensors file — and their bytes are scanned as the CRC pass reads them, so one read
// serves both. Pure over a ByteSource; a FiniteScan's visitor runs on pool threads.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "spotvisor/checkpoint/byte_source.hpp"
#include "spotvisor/checkpoint/float_scan.hpp"
#include "spotvisor/checkpoint/zip_archive.hpp"
#include "spotvisor/util/result.hpp"

namespace spotvisor::checkpoint {

// One floating-point tensor's bytes in a file.
struct TensorBytes {
  std::string key;    // as the format names it: pickle path, DCP FQN, safetensors name
  std::string where;  // the container part: "storage 'archive/data/3'", ""
  FloatType type = FloatType::kF32;
  ByteRange bytes;                  // absolute in the file: a whole storage, or the tensor
  std::uint64_t first_element = 0;  // the tensor's first element within `bytes` (storage offset)
};

// The floating-point tensors of a torch.save archive (after CheckZipLayout), one per
// storage (the first tensor that names it). `root_key` names the pickled object itself
// (a DCP item's FQN; "" for a whole file). Other dtypes are skipped.
Result<std::vector<TensorBytes>> TorchArchiveTensors(const ByteSource& source, const ZipArchive& archive,
                                                     const std::string& root_key);

// The floating-point tensors of a safetensors file whose header CheckSafetensors passed.
Result<std::vector<TensorBytes>> SafetensorsTensors(const ByteSource& source);

// Collects the first non-finite element of each tensor from the blocks its visitor sees.
// Blocks must start on element boundaries of the tensors they cover, as the CRC pass hands
// them over when the ranges read begin where the tensors begin (Ranges(), ZIP entries).
class FiniteScan {
 public:
  explicit FiniteScan(std::vector<TensorBytes> tensors);
  FiniteScan(const FiniteScan&) = delete;
  FiniteScan& operator=(const FiniteScan&) = delete;

  // Hand to Crc32OfRanges / VerifyZipCrcs; valid while the scan lives.
  const BlockVisitor* visitor() const { return &visitor_; }
  // What to read so that the visitor sees every tensor's bytes.
  std::vector<ByteRange> Ranges() const;
  // After the read: the first tensor (in file order) holding NaN or ±Inf, named with its
  // key, element index and offset.
  Status Verdict(const ByteSource& source) const;

 private:
  void Visit(std::uint64_t offset, std::span<const std::byte> block) const;

  std::vector<TensorBytes> tensors_;                         // sorted by bytes.offset
  std::unique_ptr<std::atomic<std::uint64_t>[]> first_bad_;  // per tensor: element within bytes, or max
  BlockVisitor visitor_;                                     // calls Visit
};

// Reads the scan's ranges once (on `pool`), then its verdict: for files whose bytes no CRC
// pass reads anyway.
Status ReadAndJudge(const ByteSource& source, const FiniteScan& scan, HashPool* pool);

}  // namespace spotvisor::checkpoint

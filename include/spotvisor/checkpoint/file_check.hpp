// One file of a checkpoint, checked by its own format: torch.save ZIP (local headers,
// central directory, CRC-32 of every entry), legacy torch pickle (every pickle and every storage it names), safetensors
// header, DCP shard (ZIP archives back to back), JSON, pickle. Formats are detected from
// the name and the first bytes, or forced. Pure over the file; any thread.
#pragma once

#include <filesystem>
#include <string>
#include <string_view>

#include "spotvisor/config/job_config.hpp"
#include "spotvisor/util/result.hpp"

namespace spotvisor::checkpoint {

class HashPool;

enum class FileFormat {
  kUnknown,      // no format we know: must only be readable
  kTorchZip,     // torch.save (PyTorch >= 1.6) or any stored ZIP
  kTorchLegacy,  // pre-1.6 torch.save pickle stream: no index, no checksum
  kSafetensors,
  kDcpShard,  // __<rank>_<n>.distcp
  kJson,      // trainer_state.json, config.json, index files, ...
  kPickle,    // DCP .metadata
};

std::string_view FormatName(FileFormat format);

// True for formats that hold tensors (count as "at least one known-format file").
bool IsPayloadFormat(FileFormat format);

struct FileCheckOptions {
  config::ValidateLevel level = config::ValidateLevel::kFull;
  bool verify_bytes = true;   // full level: CRCs / read every byte (off when a
                              // manifest's hashes already cover the bytes)
  std::string forced_format;  // "torch" | "safetensors" | "" (detect)
  HashPool* pool = nullptr;   // for CRCs of big files; may be null
  // finite: no floating-point tensor holds NaN or ±Inf (content_check.hpp); at the format
  // and full levels, on the same read as the CRCs.
  config::ContentCheck content = config::ContentCheck::kOff;
};

struct FileCheck {
  FileFormat format = FileFormat::kUnknown;
  Status status = Ok{};  // the failure names the file, entry and offset
  std::string note;      // e.g. "legacy pickle: structure only"
};

FileCheck CheckFile(const std::filesystem::path& file, const FileCheckOptions& options);

struct ZipArchive;
class ByteSource;

// The bytes of a ZIP archive (after CheckZipLayout) as `options` ask: every entry's CRC-32
// at the full level, and with the content check every floating-point tensor of a torch
// archive (`torch`), named under `root_key` (a DCP item's FQN; "" for a whole file).
Status CheckArchiveBytes(const ByteSource& source, const ZipArchive& archive, const FileCheckOptions& options,
                         bool torch, const std::string& root_key);

}  // namespace spotvisor::checkpoint

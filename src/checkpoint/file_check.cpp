// Per-file format checks; see file_check.hpp. The level decides how deep: structure =
// present and non-empty; format = the container's own structure; full = every byte
// (CRC-32 of every ZIP entry, or a complete read where a format has no checksum).
#include "spotvisor/checkpoint/file_check.hpp"

#include <algorithm>
#include <array>
#include <cstring>
#include <nlohmann/json.hpp>

#include "spotvisor/checkpoint/byte_source.hpp"
#include "spotvisor/checkpoint/content_check.hpp"
#include "spotvisor/checkpoint/safetensors_check.hpp"
#include "spotvisor/checkpoint/torch_pickles.hpp"
#include "spotvisor/checkpoint/zip_archive.hpp"

namespace spotvisor::checkpoint {
namespace {

namespace fs = std::filesystem;
using config::ValidateLevel;

constexpr std::array<unsigned char, 15> kLegacyMagic = {0x80, 0x02, 0x8a, 0x0a, 0x6c, 0xfc, 0x9c, 0x46,
                                                        0xf9, 0x20, 0x6a, 0xa8, 0x50, 0x19, 0x2e};
constexpr std::uint64_t kMaxJsonBytes = 64ull << 20;

bool HasExtension(const fs::path& p, std::initializer_list<std::string_view> exts) {
  const std::string e = p.extension().string();
  return std::any_of(exts.begin(), exts.end(), [&](std::string_view x) { return e == x; });
}

FileFormat Detect(const fs::path& file, std::span<const std::byte> head, const std::string& forced) {
  const bool zip = head.size() >= 4 && std::memcmp(head.data(), "PK\x03\x04", 4) == 0;
  const bool legacy =
      head.size() >= kLegacyMagic.size() && std::memcmp(head.data(), kLegacyMagic.data(), kLegacyMagic.size()) == 0;
  if (HasExtension(file, {".distcp"})) return FileFormat::kDcpShard;
  if (forced == "safetensors" || HasExtension(file, {".safetensors"})) return FileFormat::kSafetensors;
  if (zip) return FileFormat::kTorchZip;
  if (legacy) return FileFormat::kTorchLegacy;
  if (forced == "torch" || HasExtension(file, {".pt", ".pth", ".bin", ".ckpt"})) return FileFormat::kTorchZip;
  if (HasExtension(file, {".json"})) return FileFormat::kJson;
  if (file.filename() == ".metadata" || HasExtension(file, {".pkl", ".pickle"})) return FileFormat::kPickle;
  return FileFormat::kUnknown;
}

Status CheckZipFile(const ByteSource& src, const FileCheckOptions& o) {
  auto archive = ReadZipIndex(src, src.size(), /*allow_comment=*/true);
  if (!archive) {
    if (src.size() >= 4) {
      std::array<std::byte, 4> head{};
      if (src.ReadAt(0, head) && std::memcmp(head.data(), "PK\x03\x04", 4) != 0) {
        return Error{src.name() +
                     ": not a torch.save file: neither a ZIP archive nor a legacy torch pickle "
                     "(first bytes are not PK\\3\\4 or the pickle magic) (offset 0)"};
      }
    }
    return archive.error();
  }
  if (archive->start != 0) {
    return Error{src.name() + ": ZIP archive starts at offset " + std::to_string(archive->start) +
                 " instead of 0 (bytes before it are not part of the checkpoint)"};
  }
  if (auto st = CheckZipLayout(src, *archive); !st) return st;
  const bool torch = LooksLikeTorchArchive(*archive) || o.forced_format == "torch";
  if (torch) {
    if (auto st = CheckTorchRecords(src, *archive); !st) return st;
  }
  return CheckArchiveBytes(src, *archive, o, torch, "");
}

}  // namespace

Status CheckArchiveBytes(const ByteSource& src, const ZipArchive& archive, const FileCheckOptions& o, bool torch,
                         const std::string& root_key) {
  const bool crcs = o.level == ValidateLevel::kFull && o.verify_bytes;
  if (o.content != config::ContentCheck::kFinite || !torch) {
    return crcs ? VerifyZipCrcs(src, archive, o.pool) : Status(Ok{});
  }
  auto tensors = TorchArchiveTensors(src, archive, root_key);
  if (!tensors) return tensors.error();
  const FiniteScan scan(std::move(*tensors));
  if (!crcs) return ReadAndJudge(src, scan, o.pool);
  if (auto st = VerifyZipCrcs(src, archive, o.pool, scan.visitor()); !st) return st;
  return scan.Verdict(src);
}

namespace {

Status ReadEverything(const ByteSource& src, HashPool* pool) {
  auto crc = Crc32OfRanges(src, std::array<ByteRange, 1>{ByteRange{0, src.size()}}, pool);
  if (!crc) return crc.error();
  return Ok{};
}

// safetensors has no checksum: full reads every byte; the content check reads the tensors,
// which tile the data buffer, so one read serves both.
Status CheckSafetensorsFile(const ByteSource& src, const FileCheckOptions& o) {
  if (auto st = CheckSafetensors(src); !st) return st.error();
  if (o.content == config::ContentCheck::kFinite) {
    auto tensors = SafetensorsTensors(src);
    if (!tensors) return tensors.error();
    return ReadAndJudge(src, FiniteScan(std::move(*tensors)), o.pool);
  }
  return o.level == ValidateLevel::kFull && o.verify_bytes ? ReadEverything(src, o.pool) : Status(Ok{});
}

// A DCP shard: raw byte items first, then one torch.save archive per tensor; walked from
// the end, each archive's end records say where it starts.
Status CheckDcpShard(const ByteSource& src, const FileCheckOptions& o) {
  std::uint64_t end = src.size();
  std::size_t archives = 0;
  while (end > 0) {
    auto archive = ReadZipIndex(src, end, /*allow_comment=*/false);
    if (!archive) {
      if (archives > 0) break;  // the rest are raw byte items
      std::array<std::byte, 9> head{};
      if (src.size() > head.size() && src.ReadAt(0, head) && head[8] == std::byte{'{'}) {
        return CheckSafetensorsFile(src, o);  // SerializationFormat.SAFETENSORS shards
      }
      return Error{archive.error().message + " — a DCP shard must end with a complete torch.save archive"};
    }
    if (auto st = CheckZipLayout(src, *archive); !st) return st;
    if (auto st = CheckTorchRecords(src, *archive); !st) return st;
    const std::string key = "archive at offset " + std::to_string(archive->start);
    if (auto st = CheckArchiveBytes(src, *archive, o, /*torch=*/true, key); !st) return st;
    end = archive->start;
    ++archives;
  }
  if (end > 0 && o.level == ValidateLevel::kFull && o.verify_bytes) {
    auto crc = Crc32OfRanges(src, std::array<ByteRange, 1>{ByteRange{0, end}}, o.pool);
    if (!crc) return crc.error();
  }
  return Ok{};
}

Status CheckJson(const ByteSource& src) {
  if (src.size() > kMaxJsonBytes) return Error{src.name() + ": JSON file larger than 64 MiB"};
  std::string text(static_cast<std::size_t>(src.size()), '\0');
  if (auto st = src.ReadAt(0, {reinterpret_cast<std::byte*>(text.data()), text.size()}); !st) return st;
  if (JsonNestingDepth(text) > 256) {
    return Error{src.name() + ": JSON nesting too deep or brackets unbalanced (cut short?) (offset " +
                 std::to_string(text.size()) + ", the end)"};
  }
  try {
    const auto doc = nlohmann::json::parse(text);
    (void)doc;
  } catch (const nlohmann::json::parse_error& e) {
    return Error{src.name() + ": not valid JSON: " + e.what() + " (offset " +
                 std::to_string(e.byte > 0 ? e.byte - 1 : 0) + ")"};
  } catch (const nlohmann::json::exception& e) {
    return Error{src.name() + ": not valid JSON: " + e.what()};
  }
  return Ok{};
}

Status CheckPickleEnds(const ByteSource& src) {
  std::array<std::byte, 1> first{}, last{};
  if (auto st = src.ReadAt(0, first); !st) return st;
  if (auto st = src.ReadAt(src.size() - 1, last); !st) return st;
  if (first[0] != std::byte{0x80} || last[0] != std::byte{'.'}) {
    return Error{src.name() + ": not a complete pickle (no PROTO opcode at offset 0 or no STOP at offset " +
                 std::to_string(src.size() - 1) + ")"};
  }
  return Ok{};
}

}  // namespace

std::string_view FormatName(FileFormat format) {
  switch (format) {
    case FileFormat::kTorchZip:
      return "torch.save";
    case FileFormat::kTorchLegacy:
      return "torch legacy pickle";
    case FileFormat::kSafetensors:
      return "safetensors";
    case FileFormat::kDcpShard:
      return "dcp shard";
    case FileFormat::kJson:
      return "json";
    case FileFormat::kPickle:
      return "pickle";
    case FileFormat::kUnknown:
      break;
  }
  return "other";
}

bool IsPayloadFormat(FileFormat f) {
  return f == FileFormat::kTorchZip || f == FileFormat::kTorchLegacy || f == FileFormat::kSafetensors ||
         f == FileFormat::kDcpShard;
}

FileCheck CheckFile(const fs::path& file, const FileCheckOptions& o) {
  FileCheck out;
  auto src = FileSource::Open(file);
  if (!src) {
    out.status = src.error();
    return out;
  }
  std::array<std::byte, 16> head{};
  const std::size_t n = static_cast<std::size_t>(std::min<std::uint64_t>(head.size(), src->size()));
  if (auto st = src->ReadAt(0, {head.data(), n}); !st) {
    out.status = st;
    return out;
  }
  out.format = Detect(file, {head.data(), n}, o.forced_format);
  if (src->size() == 0) {
    if (out.format != FileFormat::kUnknown) out.status = Error{file.string() + ": empty file (0 bytes)"};
    return out;
  }
  const bool full_bytes = o.level == ValidateLevel::kFull && o.verify_bytes;
  if (o.level == ValidateLevel::kStructure) return out;
  switch (out.format) {
    case FileFormat::kTorchZip:
      out.status = CheckZipFile(*src, o);
      break;
    case FileFormat::kDcpShard:
      out.status = CheckDcpShard(*src, o);
      break;
    case FileFormat::kSafetensors:
      out.status = CheckSafetensorsFile(*src, o);
      out.note = "safetensors has no checksum: data bits are not verified";
      break;
    case FileFormat::kTorchLegacy:
      out.status = CheckTorchLegacy(*src, full_bytes, o.pool);
      out.note = o.content == config::ContentCheck::kFinite
                     ? "legacy torch pickle: no checksum, and its tensors are not checked for NaN/Inf"
                     : "legacy torch pickle has no checksum: data bits are not verified";
      break;
    case FileFormat::kJson:
      out.status = CheckJson(*src);
      break;
    case FileFormat::kPickle:
      out.status = CheckPickleEnds(*src);
      if (out.status && full_bytes) out.status = ReadEverything(*src, o.pool);
      break;
    case FileFormat::kUnknown:
      if (full_bytes) out.status = ReadEverything(*src, o.pool);
      break;
  }
  return out;
}

}  // namespace spotvisor::checkpoint

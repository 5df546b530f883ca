// The torch.save container: a ZIP archive (ZIP64 aware, stored entries, data descriptors).
// Reads the end records and the central directory, cross-checks every local header and
// data descriptor, recomputes every entry's CRC-32, and checks the records torch.load
// needs. Every failure names the file, the entry and the offset. Pure over a ByteSource.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "spotvisor/checkpoint/byte_source.hpp"
#include "spotvisor/util/result.hpp"

namespace spotvisor::checkpoint {

class HashPool;

struct ZipEntry {
  std::string name;
  std::uint64_t header_offset = 0;  // absolute offset of the local header
  std::uint64_t data_offset = 0;    // absolute; known after CheckZipLayout
  std::uint64_t size = 0;           // stored size (compressed == uncompressed)
  std::uint32_t crc32 = 0;          // as the central directory states it
  std::uint16_t method = 0;
  std::uint16_t flags = 0;
};

struct ZipArchive {
  std::uint64_t start = 0;        // absolute offset of the archive's first byte
  std::uint64_t end = 0;          // one past its last byte
  std::uint64_t cd_offset = 0;    // absolute offset of the central directory
  bool zip64 = false;             // ZIP64 end records present
  std::vector<ZipEntry> entries;  // in central-directory order
};

// Limits on what a hostile file can make us allocate.
inline constexpr std::uint64_t kMaxZipEntries = 1'000'000;
inline constexpr std::uint64_t kMaxCentralDirectory = 256ull << 20;

// The archive whose end-of-central-directory record ends exactly at `end` (a trailing
// comment is accepted when `allow_comment`), with its central directory parsed. Entries
// must be stored (method 0), unencrypted, uniquely named, and lie inside the archive.
Result<ZipArchive> ReadZipIndex(const ByteSource& source, std::uint64_t end, bool allow_comment);

// Local headers agree with the central directory, data lies before the central directory,
// entries do not overlap, data descriptors (when flagged) agree. Fills data_offset.
Status CheckZipLayout(const ByteSource& source, ZipArchive& archive);

// Recomputes every entry's CRC-32 (in parallel chunks on `pool`, may be null); `visit`
// (may be null) sees every entry's bytes on the way.
Status VerifyZipCrcs(const ByteSource& source, const ZipArchive& archive, HashPool* pool,
                     const BlockVisitor* visit = nullptr);

// The records torch.load needs: one top-level folder for all names, `<p>/data.pkl`
// (a pickle ending in STOP), `<p>/version` or `<p>/.data/version` (a decimal number).
// Call after CheckZipLayout.
Status CheckTorchRecords(const ByteSource& source, const ZipArchive& archive);

// True when the names look like a torch.save archive (some `<p>/data.pkl`).
bool LooksLikeTorchArchive(const ZipArchive& archive);

}  // namespace spotvisor::checkpoint

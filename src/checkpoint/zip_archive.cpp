// ZIP reading for checkpoint validation; see zip_archive.hpp. Offsets inside an archive
// are relative to its start (DCP shards hold several archives back to back), so the start
// is derived from where the end records physically are.
#include "spotvisor/checkpoint/zip_archive.hpp"

#include <algorithm>
#include <array>
#include <cstdio>
#include <cstring>
#include <unordered_set>

namespace spotvisor::checkpoint {
namespace {

constexpr std::uint32_t kLocalSig = 0x04034b50;
constexpr std::uint32_t kCentralSig = 0x02014b50;
constexpr std::uint32_t kEocdSig = 0x06054b50;
constexpr std::uint32_t kZip64EocdSig = 0x06064b50;
constexpr std::uint32_t kZip64LocatorSig = 0x07064b50;
constexpr std::uint32_t kDescriptorSig = 0x08074b50;
constexpr std::uint64_t kEocdSize = 22;
constexpr std::uint64_t kLocatorSize = 20;
constexpr std::uint64_t kZip64EocdSize = 56;
constexpr std::uint32_t kMax32 = 0xFFFFFFFFu;

std::uint16_t U16(const std::byte* p) {
  return static_cast<std::uint16_t>(std::to_integer<unsigned>(p[0]) | (std::to_integer<unsigned>(p[1]) << 8));
}
std::uint32_t U32(const std::byte* p) {
  return static_cast<std::uint32_t>(U16(p)) | (static_cast<std::uint32_t>(U16(p + 2)) << 16);
}
std::uint64_t U64(const std::byte* p) {
  return static_cast<std::uint64_t>(U32(p)) | (static_cast<std::uint64_t>(U32(p + 4)) << 32);
}

std::string Hex(std::uint32_t v) {
  char buf[11];
  std::snprintf(buf, sizeof buf, "0x%08x", v);
  return buf;
}

Error Fail(const ByteSource& s, std::uint64_t offset, const std::string& what) {
  return Error{s.name() + ": " + what + " (offset " + std::to_string(offset) + ")"};
}
Error EntryFail(const ByteSource& s, const ZipEntry& e, std::uint64_t offset, const std::string& what) {
  return Error{s.name() + ": entry '" + e.name + "': " + what + " (offset " + std::to_string(offset) + ")"};
}

// The end records found at the end of an archive.
struct EndRecords {
  std::uint64_t eocd_at = 0;  // absolute offset of the classic EOCD
  std::uint64_t entries = 0;
  std::uint64_t cd_size = 0;
  std::uint64_t cd_rel_offset = 0;  // relative to the archive start
  std::uint64_t cd_end = 0;         // absolute: where the central directory must end
  bool zip64 = false;
};

Result<std::uint64_t> FindEocd(const ByteSource& s, std::uint64_t end, bool allow_comment) {
  if (end < kEocdSize) return Fail(s, end, "too short for a ZIP archive, no end-of-central-directory record");
  const std::uint64_t window = allow_comment ? std::min<std::uint64_t>(end, kEocdSize + 0xFFFF) : kEocdSize;
  std::vector<std::byte> tail(static_cast<std::size_t>(window));
  if (auto st = s.ReadAt(end - window, tail); !st) return st.error();
  for (std::uint64_t i = window - kEocdSize + 1; i-- > 0;) {
    const std::byte* p = tail.data() + i;
    if (U32(p) == kEocdSig && i + kEocdSize + U16(p + 20) == window) return end - window + i;
  }
  return Fail(s, end,
              "no end-of-central-directory record at the end of the archive "
              "(truncated or still being written?)");
}

Result<EndRecords> ReadEndRecords(const ByteSource& s, std::uint64_t end, bool allow_comment) {
  auto at = FindEocd(s, end, allow_comment);
  if (!at) return at.error();
  std::array<std::byte, kEocdSize> e{};
  if (auto st = s.ReadAt(*at, e); !st) return st.error();
  EndRecords r;
  r.eocd_at = *at;
  if (U16(e.data() + 4) != 0 && U16(e.data() + 4) != 0xFFFF) {
    return Fail(s, *at, "multi-disk ZIP archives are not supported");
  }
  r.entries = U16(e.data() + 10);
  r.cd_size = U32(e.data() + 12);
  r.cd_rel_offset = U32(e.data() + 16);
  r.cd_end = *at;
  if (*at >= kLocatorSize + kZip64EocdSize) {
    std::array<std::byte, kLocatorSize> loc{};
    if (auto st = s.ReadAt(*at - kLocatorSize, loc); !st) return st.error();
    if (U32(loc.data()) == kZip64LocatorSig) {
      const std::uint64_t z_at = *at - kLocatorSize - kZip64EocdSize;
      std::array<std::byte, kZip64EocdSize> z{};
      if (auto st = s.ReadAt(z_at, z); !st) return st.error();
      if (U32(z.data()) != kZip64EocdSig) {
        return Fail(s, z_at, "ZIP64 locator present but no ZIP64 end record before it");
      }
      if (U64(z.data() + 4) != kZip64EocdSize - 12) {
        return Fail(s, z_at, "ZIP64 end record has an unexpected size");
      }
      const std::uint64_t entries = U64(z.data() + 32);
      const std::uint64_t cd_size = U64(z.data() + 40);
      const std::uint64_t cd_off = U64(z.data() + 48);
      if ((r.entries != 0xFFFF && r.entries != entries) || (r.cd_size != kMax32 && r.cd_size != cd_size) ||
          (r.cd_rel_offset != kMax32 && r.cd_rel_offset != cd_off)) {
        return Fail(s, z_at, "ZIP64 end record disagrees with the end-of-central-directory record");
      }
      // The locator names the ZIP64 record relative to the archive start.
      const std::uint64_t z_rel = U64(loc.data() + 8);
      if (z_rel > z_at || cd_off > z_rel || cd_size != z_rel - cd_off) {
        return Fail(s, z_at, "ZIP64 end records do not agree on where the central directory is");
      }
      r.entries = entries;
      r.cd_size = cd_size;
      r.cd_rel_offset = cd_off;
      r.cd_end = z_at;
      r.zip64 = true;
    }
  }
  return r;
}

// Applies the ZIP64 extended-information extra field (0x0001) to an entry's fields.
Status ApplyZip64Extra(const ByteSource& s, const std::byte* extra, std::size_t len, std::uint64_t at,
                       std::uint64_t& usize, std::uint64_t& csize, std::uint64_t& lho) {
  std::size_t i = 0;
  while (i + 4 <= len) {
    const std::uint16_t id = U16(extra + i);
    const std::uint16_t n = U16(extra + i + 2);
    if (i + 4 + n > len) return Fail(s, at, "extra field runs past its declared length");
    if (id == 0x0001) {
      std::size_t j = i + 4;
      for (std::uint64_t* field : {&usize, &csize, &lho}) {
        if (*field != kMax32) continue;
        if (j + 8 > i + 4 + n) return Fail(s, at, "ZIP64 extra field too short");
        *field = U64(extra + j);
        j += 8;
      }
    }
    i += 4 + n;
  }
  return Ok{};
}

}  // namespace

Result<ZipArchive> ReadZipIndex(const ByteSource& s, std::uint64_t end, bool allow_comment) {
  auto r = ReadEndRecords(s, end, allow_comment);
  if (!r) return r.error();
  if (r->cd_size > r->cd_end || r->cd_rel_offset > r->cd_end - r->cd_size) {
    return Fail(s, r->eocd_at, "central directory offset/size point outside the file");
  }
  if (r->cd_size > kMaxCentralDirectory || r->entries > kMaxZipEntries) {
    return Fail(s, r->eocd_at, "central directory too large (" + std::to_string(r->entries) + " entries)");
  }
  ZipArchive a;
  a.cd_offset = r->cd_end - r->cd_size;
  a.start = a.cd_offset - r->cd_rel_offset;
  a.end = end;
  a.zip64 = r->zip64;
  std::vector<std::byte> cd(static_cast<std::size_t>(r->cd_size));
  if (auto st = s.ReadAt(a.cd_offset, cd); !st) return st.error();
  std::unordered_set<std::string> names;
  std::size_t pos = 0;
  for (std::uint64_t i = 0; i < r->entries; ++i) {
    const std::uint64_t at = a.cd_offset + pos;
    if (pos + 46 > cd.size() || U32(cd.data() + pos) != kCentralSig) {
      return Fail(s, at, "central directory entry " + std::to_string(i) + " is missing or damaged");
    }
    const std::byte* p = cd.data() + pos;
    const std::size_t nlen = U16(p + 28), elen = U16(p + 30), clen = U16(p + 32);
    if (pos + 46 + nlen + elen + clen > cd.size()) {
      return Fail(s, at, "central directory entry " + std::to_string(i) + " runs past the directory");
    }
    ZipEntry e;
    e.name.assign(reinterpret_cast<const char*>(p + 46), nlen);
    e.flags = U16(p + 8);
    e.method = U16(p + 10);
    e.crc32 = U32(p + 16);
    std::uint64_t csize = U32(p + 20), usize = U32(p + 24), lho = U32(p + 42);
    if (auto st = ApplyZip64Extra(s, p + 46 + nlen, elen, at, usize, csize, lho); !st) return st.error();
    if (e.name.empty()) return Fail(s, at, "central directory entry " + std::to_string(i) + " has no name");
    if (!names.insert(e.name).second) return EntryFail(s, e, at, "name appears twice in the central directory");
    if (e.flags & 0x0001) return EntryFail(s, e, at, "entry is encrypted");
    if (e.method != 0) {
      return EntryFail(
          s, e, at,
          "entry is compressed (method " + std::to_string(e.method) + "); torch.save stores entries uncompressed");
    }
    if (csize != usize) return EntryFail(s, e, at, "stored entry with different compressed and uncompressed sizes");
    if (lho >= r->cd_rel_offset) return EntryFail(s, e, at, "local header offset lies beyond the central directory");
    e.size = csize;
    e.header_offset = a.start + lho;
    a.entries.push_back(std::move(e));
    pos += 46 + nlen + elen + clen;
  }
  if (pos != cd.size()) {
    return Fail(s, a.cd_offset + pos,
                "central directory is " + std::to_string(cd.size()) + " bytes but its entries end after " +
                    std::to_string(pos));
  }
  return a;
}

Status CheckZipLayout(const ByteSource& s, ZipArchive& a) {
  std::vector<ZipEntry*> by_offset;
  for (auto& e : a.entries) by_offset.push_back(&e);
  std::sort(by_offset.begin(), by_offset.end(),
            [](const ZipEntry* x, const ZipEntry* y) { return x->header_offset < y->header_offset; });
  std::uint64_t previous_end = a.start;  // no entry may start before this
  for (ZipEntry* e : by_offset) {
    const std::uint64_t at = e->header_offset;
    if (at < previous_end) return EntryFail(s, *e, at, "local header overlaps the previous entry");
    std::array<std::byte, 30> h{};
    if (at + h.size() > a.cd_offset) return EntryFail(s, *e, at, "local header runs into the central directory");
    if (auto st = s.ReadAt(at, h); !st) return st.error();
    if (U32(h.data()) != kLocalSig) return EntryFail(s, *e, at, "local header signature is wrong");
    const std::size_t nlen = U16(h.data() + 26), elen = U16(h.data() + 28);
    if (at + 30 + nlen + elen > a.cd_offset)
      return EntryFail(s, *e, at, "local header runs into the central directory");
    std::string name(nlen, '\0');
    if (auto st = s.ReadAt(at + 30, {reinterpret_cast<std::byte*>(name.data()), nlen}); !st) return st.error();
    if (name != e->name) return EntryFail(s, *e, at, "local header names '" + name + "' instead");
    if (U16(h.data() + 8) != e->method)
      return EntryFail(s, *e, at, "local header and central directory disagree on the method");
    const std::uint16_t lflags = U16(h.data() + 6);
    if (!(lflags & 0x0008)) {
      const std::uint32_t crc = U32(h.data() + 14), csize = U32(h.data() + 18);
      if (crc != e->crc32)
        return EntryFail(s, *e, at,
                         "local header CRC-32 " + Hex(crc) + " differs from the central directory's " + Hex(e->crc32));
      if (csize != kMax32 && csize != e->size)
        return EntryFail(s, *e, at, "local header size differs from the central directory's");
    }
    e->data_offset = at + 30 + nlen + elen;
    std::uint64_t end = e->data_offset + e->size;
    if (e->size > a.cd_offset || e->data_offset > a.cd_offset - e->size) {
      return EntryFail(s, *e, e->data_offset,
                       "data (" + std::to_string(e->size) + " bytes) runs into the central directory");
    }
    if (lflags & 0x0008) {
      std::array<std::byte, 24> d{};
      const std::uint64_t avail = std::min<std::uint64_t>(d.size(), a.cd_offset - end);
      if (auto st = s.ReadAt(end, {d.data(), static_cast<std::size_t>(avail)}); !st) return st.error();
      const std::size_t sig = (avail >= 4 && U32(d.data()) == kDescriptorSig) ? 4 : 0;
      const bool fits32 = avail >= sig + 12, fits64 = avail >= sig + 20;
      const bool ok32 = fits32 && U32(d.data() + sig) == e->crc32 && U32(d.data() + sig + 4) == e->size &&
                        U32(d.data() + sig + 8) == e->size;
      const bool ok64 = fits64 && U32(d.data() + sig) == e->crc32 && U64(d.data() + sig + 4) == e->size &&
                        U64(d.data() + sig + 12) == e->size;
      if (!ok32 && !ok64)
        return EntryFail(s, *e, end, "data descriptor is missing or disagrees with the central directory");
      end += sig + (ok64 ? 20 : 12);
    }
    previous_end = end;
  }
  return Ok{};
}

Status VerifyZipCrcs(const ByteSource& s, const ZipArchive& a, HashPool* pool, const BlockVisitor* visit) {
  std::vector<ByteRange> ranges;
  ranges.reserve(a.entries.size());
  for (const auto& e : a.entries) ranges.push_back({e.data_offset, e.size});
  auto crcs = Crc32OfRanges(s, ranges, pool, visit);
  if (!crcs) return crcs.error();
  for (std::size_t i = 0; i < a.entries.size(); ++i) {
    const auto& e = a.entries[i];
    if ((*crcs)[i] != e.crc32) {
      return EntryFail(s, e, e.data_offset,
                       "CRC-32 mismatch: stored " + Hex(e.crc32) + ", computed " + Hex((*crcs)[i]) + " over " +
                           std::to_string(e.size) + " bytes");
    }
  }
  return Ok{};
}

bool LooksLikeTorchArchive(const ZipArchive& a) {
  return std::any_of(a.entries.begin(), a.entries.end(), [](const ZipEntry& e) {
    const auto slash = e.name.find('/');
    return slash != std::string::npos && e.name.substr(slash + 1) == "data.pkl";
  });
}

Status CheckTorchRecords(const ByteSource& s, const ZipArchive& a) {
  if (a.entries.empty()) return Fail(s, a.start, "torch.save archive has no entries");
  const auto slash = a.entries.front().name.find('/');
  if (slash == std::string::npos || slash == 0) {
    return Fail(s, a.entries.front().header_offset,
                "first entry '" + a.entries.front().name + "' is not in a top-level folder");
  }
  const std::string prefix = a.entries.front().name.substr(0, slash + 1);
  const ZipEntry* pkl = nullptr;
  const ZipEntry* version = nullptr;
  for (const auto& e : a.entries) {
    if (e.name.compare(0, prefix.size(), prefix) != 0) {
      return EntryFail(s, e, e.header_offset, "entry is outside the archive folder '" + prefix + "'");
    }
    const std::string rest = e.name.substr(prefix.size());
    if (rest == "data.pkl") pkl = &e;
    if (rest == "version" || rest == ".data/version") version = &e;
  }
  if (pkl == nullptr) return Fail(s, a.cd_offset, "torch.save archive has no " + prefix + "data.pkl");
  if (version == nullptr) return Fail(s, a.cd_offset, "torch.save archive has no " + prefix + "version record");
  std::array<std::byte, 1> first{}, last{};
  if (pkl->size < 2) return EntryFail(s, *pkl, pkl->data_offset, "pickle is empty");
  if (auto st = s.ReadAt(pkl->data_offset, first); !st) return st.error();
  if (auto st = s.ReadAt(pkl->data_offset + pkl->size - 1, last); !st) return st.error();
  if (first[0] != std::byte{0x80} || last[0] != std::byte{'.'}) {
    return EntryFail(s, *pkl, pkl->data_offset,
                     "is not a complete pickle (no PROTO opcode at the start or STOP at the end)");
  }
  if (version->size == 0 || version->size > 32)
    return EntryFail(s, *version, version->data_offset, "version record has an odd size");
  std::string text(static_cast<std::size_t>(version->size), '\0');
  if (auto st = s.ReadAt(version->data_offset, {reinterpret_cast<std::byte*>(text.data()), text.size()}); !st)
    return st.error();
  if (!text.empty() && text.back() == '\n') text.pop_back();
  if (text.empty() || !std::all_of(text.begin(), text.end(), [](char c) { return c >= '0' && c <= '9'; })) {
    return EntryFail(s, *version, version->data_offset, "version record is not a decimal number");
  }
  return Ok{};
}

}  // namespace spotvisor::checkpoint

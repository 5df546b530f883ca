// Test-only writers of checkpoint containers: safetensors per the spec and stored ZIP
// archives shaped like torch.save output (data descriptors, optional ZIP64 end records).
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "spotvisor/checkpoint/crc32.hpp"

namespace spotvisor::checkpoint::testfiles {

inline void Put16(std::string& s, std::uint16_t v) {
  s.push_back(static_cast<char>(v & 0xFF));
  s.push_back(static_cast<char>(v >> 8));
}
inline void Put32(std::string& s, std::uint32_t v) {
  Put16(s, static_cast<std::uint16_t>(v & 0xFFFF));
  Put16(s, static_cast<std::uint16_t>(v >> 16));
}
inline void Put64(std::string& s, std::uint64_t v) {
  Put32(s, static_cast<std::uint32_t>(v));
  Put32(s, static_cast<std::uint32_t>(v >> 32));
}

// safetensors: 8-byte LE length, header padded with spaces to a multiple of 8, data.
inline std::string Safetensors(const std::string& header_json, const std::string& data) {
  std::string header = header_json;
  while (header.size() % 8 != 0) header.push_back(' ');
  std::string out;
  Put64(out, header.size());
  return out + header + data;
}

// A stored ZIP like torch.save writes: local headers with sizes 0 and flag 8, 64-byte
// aligned data via an "FB" extra field, data descriptors, central directory, ZIP64 end
// records (when `zip64`), end record.
inline std::string Zip(const std::vector<std::pair<std::string, std::string>>& entries, bool zip64 = true) {
  struct Cd {
    std::string name;
    std::uint32_t crc;
    std::uint64_t size;
    std::uint64_t offset;
  };
  std::string out;
  std::vector<Cd> cd;
  for (const auto& [name, data] : entries) {
    const std::uint64_t at = out.size();
    const std::uint32_t crc = Crc32(0, data.data(), data.size());
    std::size_t pad = (64 - (at + 30 + name.size() + 4) % 64) % 64;
    Put32(out, 0x04034b50);
    Put16(out, 20);
    Put16(out, 0x0008);
    Put16(out, 0);
    Put32(out, 0);
    Put32(out, 0);
    Put32(out, 0);
    Put32(out, 0);
    Put16(out, static_cast<std::uint16_t>(name.size()));
    Put16(out, static_cast<std::uint16_t>(4 + pad));
    out += name;
    Put16(out, 0x4246);
    Put16(out, static_cast<std::uint16_t>(pad));
    out += std::string(pad, 'Z');
    out += data;
    Put32(out, 0x08074b50);
    Put32(out, crc);
    Put32(out, static_cast<std::uint32_t>(data.size()));
    Put32(out, static_cast<std::uint32_t>(data.size()));
    cd.push_back({name, crc, data.size(), at});
  }
  const std::uint64_t cd_start = out.size();
  for (const auto& e : cd) {
    Put32(out, 0x02014b50);
    Put16(out, 45);
    Put16(out, 20);
    Put16(out, 0x0008);
    Put16(out, 0);
    Put32(out, 0);
    Put32(out, e.crc);
    Put32(out, static_cast<std::uint32_t>(e.size));
    Put32(out, static_cast<std::uint32_t>(e.size));
    Put16(out, static_cast<std::uint16_t>(e.name.size()));
    Put16(out, 0);
    Put16(out, 0);
    Put16(out, 0);
    Put16(out, 0);
    Put32(out, 0);
    Put32(out, static_cast<std::uint32_t>(e.offset));
    out += e.name;
  }
  const std::uint64_t cd_size = out.size() - cd_start;
  if (zip64) {
    const std::uint64_t z_at = out.size();
    Put32(out, 0x06064b50);
    Put64(out, 44);
    Put16(out, 45);
    Put16(out, 45);
    Put32(out, 0);
    Put32(out, 0);
    Put64(out, cd.size());
    Put64(out, cd.size());
    Put64(out, cd_size);
    Put64(out, cd_start);
    Put32(out, 0x07064b50);
    Put32(out, 0);
    Put64(out, z_at);
    Put32(out, 1);
  }
  Put32(out, 0x06054b50);
  Put16(out, 0);
  Put16(out, 0);
  Put16(out, static_cast<std::uint16_t>(cd.size()));
  Put16(out, static_cast<std::uint16_t>(cd.size()));
  Put32(out, static_cast<std::uint32_t>(cd_size));
  Put32(out, static_cast<std::uint32_t>(cd_start));
  Put16(out, 0);
  return out;
}

// The entries of a small torch.save archive under `prefix/`.
inline std::vector<std::pair<std::string, std::string>> TorchEntries(const std::string& prefix) {
  return {{prefix + "/data.pkl", std::string("\x80\x02}q\x00.", 6)},
          {prefix + "/data/0", std::string(4096, '\x11') + "tensor-bytes"},
          {prefix + "/data/1", std::string(100, '\x22')},
          {prefix + "/version", "3\n"}};
}

}  // namespace spotvisor::checkpoint::testfiles

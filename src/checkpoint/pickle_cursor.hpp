// Private to src/checkpoint/: reads a pickle's bytes forward from a ByteSource in 64 KiB
// blocks, up to a limit; running out is "truncated", naming the source and the offset.
#pragma once

#include <algorithm>
#include <array>
#include <cstdint>
#include <cstring>
#include <span>
#include <string>
#include <vector>

#include "spotvisor/checkpoint/byte_source.hpp"
#include "spotvisor/util/result.hpp"

namespace spotvisor::checkpoint {

class PickleCursor {
 public:
  PickleCursor(const ByteSource& s, std::uint64_t offset, std::uint64_t limit)
      : s_(s), pos_(offset), limit_(std::min(limit, s.size())) {}

  std::uint64_t pos() const { return pos_; }

  Status Read(std::span<std::byte> out) {
    if (out.size() > limit_ - pos_) {
      return Error{s_.name() + ": pickle ends at offset " + std::to_string(limit_) +
                   " before its STOP opcode (truncated)"};
    }
    std::size_t done = 0;
    while (done < out.size()) {
      if (pos_ < block_start_ || pos_ >= block_start_ + block_.size()) {
        if (auto st = Fill(); !st) return st;
      }
      const std::size_t at = static_cast<std::size_t>(pos_ - block_start_);
      const std::size_t n = std::min(out.size() - done, block_.size() - at);
      std::memcpy(out.data() + done, block_.data() + at, n);
      done += n;
      pos_ += n;
    }
    return Ok{};
  }

  Result<std::uint64_t> LittleEndian(std::size_t width) {
    std::array<std::byte, 8> b{};
    if (auto st = Read({b.data(), width}); !st) return st.error();
    std::uint64_t v = 0;
    for (std::size_t i = 0; i < width; ++i) v |= static_cast<std::uint64_t>(b[i]) << (8 * i);
    return v;
  }

  Result<std::string> Bytes(std::uint64_t n) {
    if (n > limit_ - pos_) {
      return Error{s_.name() + ": pickle ends at offset " + std::to_string(limit_) +
                   " before its STOP opcode (truncated)"};
    }
    std::string out(static_cast<std::size_t>(n), '\0');
    if (auto st = Read({reinterpret_cast<std::byte*>(out.data()), out.size()}); !st) return st.error();
    return out;
  }

  // A protocol-0 argument: up to the newline, which is dropped.
  Result<std::string> Line() {
    std::string out;
    for (;;) {
      std::array<std::byte, 1> c{};
      if (auto st = Read(c); !st) return st.error();
      if (c[0] == std::byte{'\n'}) return out;
      if (out.size() > 4096)
        return Error{s_.name() + ": pickle text argument longer than 4 KiB at offset " + std::to_string(pos_)};
      out.push_back(static_cast<char>(c[0]));
    }
  }

 private:
  Status Fill() {
    block_start_ = pos_;
    block_.resize(static_cast<std::size_t>(std::min<std::uint64_t>(64 * 1024, limit_ - pos_)));
    return s_.ReadAt(pos_, block_);
  }

  const ByteSource& s_;
  std::uint64_t pos_;
  std::uint64_t limit_;
  std::uint64_t block_start_ = 0;
  std::vector<std::byte> block_;
};

}  // namespace spotvisor::checkpoint

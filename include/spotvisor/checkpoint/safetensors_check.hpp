// The safetensors container: u64 LE header length N (at most 100 MB), a JSON header, then
// the byte buffer. Complete header validation as the reference implementation does it, and
// then some (duplicate names, UTF-8, overflow-checked sizes, exact tiling of the buffer,
// exact file size). The format has no checksum: flipped data bits pass. Pure.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "spotvisor/checkpoint/byte_source.hpp"
#include "spotvisor/util/result.hpp"

namespace spotvisor::checkpoint {

inline constexpr std::uint64_t kMaxSafetensorsHeader = 100'000'000;

struct SafetensorsSummary {
  std::uint64_t tensors = 0;       // entries besides __metadata__
  std::uint64_t data_bytes = 0;    // size of the byte buffer
  std::vector<std::string> names;  // the tensors, in buffer order
};

// Validates the header of the file in `source` against its size. A failure names the file
// and the offset (of the tensor's entry in the header, or where the file ends).
Result<SafetensorsSummary> CheckSafetensors(const ByteSource& source);

// The same for a header already read: `header` is the JSON, `file_size` the whole file.
Result<SafetensorsSummary> CheckSafetensorsHeader(std::string_view header, std::uint64_t file_size,
                                                  const std::string& name);

// The deepest nesting of [ and { outside strings, or SIZE_MAX if brackets do not balance.
// Lets JSON parsers refuse hostile nesting before building anything.
std::size_t JsonNestingDepth(std::string_view json);

}  // namespace spotvisor::checkpoint

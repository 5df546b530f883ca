// safetensors header validation; see safetensors_check.hpp. nlohmann-json parses the
// header (exceptions stay inside this file); a parse callback catches duplicate names that
// a plain object parse would silently merge.
#include "spotvisor/checkpoint/safetensors_check.hpp"

#include <algorithm>
#include <array>
#include <limits>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <vector>

namespace spotvisor::checkpoint {
namespace {

using Json = nlohmann::json;

// Bits per element, by dtype name (safetensors Dtype::bitsize).
std::uint64_t DtypeBits(const std::string& dtype) {
  static const std::map<std::string, std::uint64_t> kBits = {
      {"BOOL", 8},    {"F4", 4},      {"F6_E2M3", 6}, {"F6_E3M2", 6},     {"U8", 8},          {"I8", 8},
      {"F8_E5M2", 8}, {"F8_E4M3", 8}, {"F8_E8M0", 8}, {"F8_E4M3FNUZ", 8}, {"F8_E5M2FNUZ", 8}, {"I16", 16},
      {"U16", 16},    {"F16", 16},    {"BF16", 16},   {"I32", 32},        {"U32", 32},        {"F32", 32},
      {"C64", 64},    {"F64", 64},    {"I64", 64},    {"U64", 64}};
  const auto it = kBits.find(dtype);
  return it == kBits.end() ? 0 : it->second;
}

Error HeaderError(const std::string& name, const std::string& what) {
  return Error{name + ": safetensors header: " + what};
}
Error HeaderError(const std::string& name, const std::string& what, std::uint64_t offset) {
  return HeaderError(name, what + " (offset " + std::to_string(offset) + ")");
}

// The file offset of `key`'s name in the header (which starts at offset 8), or of the header.
std::uint64_t KeyOffset(std::string_view header, const std::string& key) {
  const auto at = header.find(Json(key).dump());
  return 8 + (at == std::string_view::npos ? 0 : at);
}

struct Span {
  std::uint64_t begin;
  std::uint64_t end;
  std::string tensor;
};

Result<Span> CheckTensor(const std::string& file, const std::string& key, const Json& t) {
  const std::string who = "tensor '" + key + "'";
  if (!t.is_object()) return HeaderError(file, who + " is not an object");
  for (const auto& [field, value] : t.items()) {
    (void)value;
    if (field != "dtype" && field != "shape" && field != "data_offsets") {
      return HeaderError(file, who + " has unknown field '" + field + "'");
    }
  }
  if (!t.contains("dtype") || !t["dtype"].is_string()) return HeaderError(file, who + " has no dtype string");
  const std::uint64_t bits = DtypeBits(t["dtype"].get<std::string>());
  if (bits == 0) return HeaderError(file, who + " has unknown dtype '" + t["dtype"].get<std::string>() + "'");
  if (!t.contains("shape") || !t["shape"].is_array()) return HeaderError(file, who + " has no shape array");
  std::uint64_t nbits = bits;
  for (const auto& d : t["shape"]) {
    if (!d.is_number_unsigned())
      return HeaderError(file, who + " has a shape entry that is not a non-negative integer");
    const std::uint64_t dim = d.get<std::uint64_t>();
    if (dim != 0 && nbits > std::numeric_limits<std::uint64_t>::max() / dim) {
      return HeaderError(file, who + " size overflows (shape too large)");
    }
    nbits *= dim;
  }
  const auto& off = t.contains("data_offsets") ? t["data_offsets"] : Json();
  if (!off.is_array() || off.size() != 2 || !off[0].is_number_unsigned() || !off[1].is_number_unsigned()) {
    return HeaderError(file, who + " has no data_offsets [begin, end] of non-negative integers");
  }
  Span span{off[0].get<std::uint64_t>(), off[1].get<std::uint64_t>(), key};
  if (span.begin > span.end) return HeaderError(file, who + " has data_offsets with begin > end");
  if (nbits % 8 != 0) return HeaderError(file, who + " is not a whole number of bytes (misaligned slice)");
  if (span.end - span.begin != nbits / 8) {
    return HeaderError(file, who + " covers " + std::to_string(span.end - span.begin) +
                                 " bytes but dtype x shape needs " + std::to_string(nbits / 8));
  }
  return span;
}

}  // namespace

std::size_t JsonNestingDepth(std::string_view json) {
  std::size_t depth = 0, deepest = 0;
  bool in_string = false, escaped = false;
  for (char c : json) {
    if (in_string) {
      if (escaped) escaped = false;
      else if (c == '\\') escaped = true;
      else if (c == '"') in_string = false;
      continue;
    }
    if (c == '"') in_string = true;
    else if (c == '[' || c == '{') deepest = std::max(deepest, ++depth);
    else if (c == ']' || c == '}') {
      if (depth == 0) return std::numeric_limits<std::size_t>::max();
      --depth;
    }
  }
  return depth == 0 ? deepest : std::numeric_limits<std::size_t>::max();
}

Result<SafetensorsSummary> CheckSafetensorsHeader(std::string_view header, std::uint64_t file_size,
                                                  const std::string& name) {
  if (header.empty() || header.front() != '{') return HeaderError(name, "does not start with '{'", 8);
  if (JsonNestingDepth(header) > 4) return HeaderError(name, "nesting is too deep or brackets do not balance", 8);
  std::string duplicate;
  std::vector<std::set<std::string>> keys_at_depth;
  Json::parser_callback_t callback = [&](int depth, Json::parse_event_t event, Json& parsed) {
    const auto d = static_cast<std::size_t>(depth);
    if (event == Json::parse_event_t::object_start) {
      if (keys_at_depth.size() <= d + 1) keys_at_depth.resize(d + 2);
      keys_at_depth[d + 1].clear();
    } else if (event == Json::parse_event_t::key && parsed.is_string()) {
      if (keys_at_depth.size() <= d) keys_at_depth.resize(d + 1);
      if (!keys_at_depth[d].insert(parsed.get<std::string>()).second && duplicate.empty()) {
        duplicate = parsed.get<std::string>();
      }
    }
    return true;
  };
  Json doc;
  try {
    doc = Json::parse(header.begin(), header.end(), callback);
  } catch (const Json::parse_error& e) {
    return HeaderError(name, std::string("is not valid UTF-8 JSON: ") + e.what(), 8 + (e.byte > 0 ? e.byte - 1 : 0));
  } catch (const Json::exception& e) {
    return HeaderError(name, std::string("is not valid UTF-8 JSON: ") + e.what(), 8);
  }
  if (!duplicate.empty()) {
    const auto at = header.rfind(Json(duplicate).dump());
    return HeaderError(name, "name '" + duplicate + "' appears twice", 8 + (at == std::string_view::npos ? 0 : at));
  }
  if (!doc.is_object()) return HeaderError(name, "is not a JSON object", 8);
  std::vector<Span> spans;
  for (const auto& [key, value] : doc.items()) {
    if (key == "__metadata__") {
      if (!value.is_object()) return HeaderError(name, "__metadata__ is not an object", KeyOffset(header, key));
      for (const auto& [mk, mv] : value.items()) {
        if (!mv.is_string())
          return HeaderError(name, "__metadata__ value '" + mk + "' is not a string", KeyOffset(header, mk));
      }
      continue;
    }
    auto span = CheckTensor(name, key, value);
    if (!span) return Error{span.error().message + " (offset " + std::to_string(KeyOffset(header, key)) + ")"};
    spans.push_back(std::move(*span));
  }
  std::sort(spans.begin(), spans.end(),
            [](const Span& a, const Span& b) { return a.begin != b.begin ? a.begin < b.begin : a.end < b.end; });
  std::uint64_t covered = 0;
  for (const auto& s : spans) {
    if (s.begin != covered) {
      return HeaderError(name,
                         "tensor '" + s.tensor + "' starts at buffer offset " + std::to_string(s.begin) +
                             " but the previous tensor ends at " + std::to_string(covered) +
                             (s.begin < covered ? " (overlap)" : " (gap)"),
                         KeyOffset(header, s.tensor));
    }
    covered = s.end;
  }
  const std::uint64_t expected = 8 + header.size() + covered;  // cannot overflow: all <= file size checks
  if (expected != file_size) {
    return HeaderError(name,
                       "tensors cover " + std::to_string(covered) + " data bytes, so the file should be " +
                           std::to_string(expected) + " bytes, but it is " + std::to_string(file_size) +
                           (file_size < expected ? " (truncated)" : " (trailing bytes)"),
                       std::min(expected, file_size));
  }
  SafetensorsSummary summary{spans.size(), covered, {}};
  summary.names.reserve(spans.size());
  for (auto& s : spans) summary.names.push_back(std::move(s.tensor));
  return summary;
}

Result<SafetensorsSummary> CheckSafetensors(const ByteSource& source) {
  const std::uint64_t size = source.size();
  if (size < 8)
    return HeaderError(source.name(), "file is " + std::to_string(size) + " bytes, too short for the 8-byte length",
                       size);
  std::array<std::byte, 8> len{};
  if (auto st = source.ReadAt(0, len); !st) return st.error();
  std::uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = (n << 8) | std::to_integer<std::uint64_t>(len[static_cast<std::size_t>(i)]);
  if (n > kMaxSafetensorsHeader)
    return HeaderError(source.name(), "declared length " + std::to_string(n) + " exceeds 100 MB", 0);
  if (n > size - 8) {
    return HeaderError(source.name(),
                       "declared length " + std::to_string(n) + " runs past the end of the " + std::to_string(size) +
                           "-byte file (truncated?)",
                       size);
  }
  std::string header(static_cast<std::size_t>(n), '\0');
  if (auto st = source.ReadAt(8, {reinterpret_cast<std::byte*>(header.data()), header.size()}); !st) return st.error();
  return CheckSafetensorsHeader(header, size, source.name());
}

}  // namespace spotvisor::checkpoint

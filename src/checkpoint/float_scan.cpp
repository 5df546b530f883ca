// The non-finite scan; see float_scan.hpp. A value is NaN or ±Inf exactly when its exponent
// bits are all ones, so one mask and compare per element decides it. Elements are tested
// 64 at a time with an OR of the results and no early exit inside a block, a shape the
// compiler turns into SIMD (this file is built with -O3, see CMakeLists.txt); only a block
// that has one is searched element by element.
#include "spotvisor/checkpoint/float_scan.hpp"

#include <cstring>

namespace spotvisor::checkpoint {
namespace {

constexpr std::size_t kBlock = 64;

template <typename Bits>
Bits Load(const std::byte* p) {
  Bits v;
  std::memcpy(&v, p, sizeof v);
  return v;
}

template <typename Bits, Bits kExponent>
std::optional<std::uint64_t> Scan(std::span<const std::byte> bytes) {
  const std::byte* p = bytes.data();
  const std::size_t n = bytes.size() / sizeof(Bits);
  std::size_t i = 0;
  for (; i + kBlock <= n; i += kBlock) {
    unsigned bad = 0;
    for (std::size_t j = 0; j < kBlock; ++j) {
      bad |= (Load<Bits>(p + (i + j) * sizeof(Bits)) & kExponent) == kExponent ? 1u : 0u;
    }
    if (bad != 0) break;
  }
  for (; i < n; ++i) {
    if ((Load<Bits>(p + i * sizeof(Bits)) & kExponent) == kExponent) return i;
  }
  return std::nullopt;
}

}  // namespace

std::size_t ElementSize(FloatType type) {
  switch (type) {
    case FloatType::kF16:
    case FloatType::kBF16:
      return 2;
    case FloatType::kF32:
      return 4;
    case FloatType::kF64:
      break;
  }
  return 8;
}

std::string_view FloatTypeName(FloatType type) {
  switch (type) {
    case FloatType::kF16:
      return "float16";
    case FloatType::kBF16:
      return "bfloat16";
    case FloatType::kF32:
      return "float32";
    case FloatType::kF64:
      break;
  }
  return "float64";
}

std::optional<std::uint64_t> FirstNonFinite(FloatType type, std::span<const std::byte> bytes) {
  switch (type) {
    case FloatType::kF16:
      return Scan<std::uint16_t, 0x7c00>(bytes);
    case FloatType::kBF16:
      return Scan<std::uint16_t, 0x7f80>(bytes);
    case FloatType::kF32:
      return Scan<std::uint32_t, 0x7f800000u>(bytes);
    case FloatType::kF64:
      break;
  }
  return Scan<std::uint64_t, 0x7ff0000000000000ull>(bytes);
}

std::string_view ClassifyElement(FloatType type, std::span<const std::byte> bytes) {
  if (bytes.size() < ElementSize(type)) return "finite";
  std::uint64_t exponent = 0, exponent_mask = 0, mantissa = 0, sign = 0;
  switch (type) {
    case FloatType::kF16: {
      const auto v = Load<std::uint16_t>(bytes.data());
      exponent = v & 0x7c00u, exponent_mask = 0x7c00u, mantissa = v & 0x03ffu, sign = v >> 15;
      break;
    }
    case FloatType::kBF16: {
      const auto v = Load<std::uint16_t>(bytes.data());
      exponent = v & 0x7f80u, exponent_mask = 0x7f80u, mantissa = v & 0x007fu, sign = v >> 15;
      break;
    }
    case FloatType::kF32: {
      const auto v = Load<std::uint32_t>(bytes.data());
      exponent = v & 0x7f800000u, exponent_mask = 0x7f800000u, mantissa = v & 0x007fffffu, sign = v >> 31;
      break;
    }
    case FloatType::kF64: {
      const auto v = Load<std::uint64_t>(bytes.data());
      exponent = v & 0x7ff0000000000000ull, exponent_mask = 0x7ff0000000000000ull;
      mantissa = v & 0x000fffffffffffffull, sign = v >> 63;
      break;
    }
  }
  if (exponent != exponent_mask) return "finite";
  if (mantissa != 0) return "NaN";
  return sign != 0 ? "-Inf" : "+Inf";
}

}  // namespace spotvisor::checkpoint

// Finds NaN and ±Inf in raw little-endian floating-point bytes (float16, bfloat16, float32,
// float64): the kernel of the content check. Pure; any thread.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string_view>

namespace spotvisor::checkpoint {

enum class FloatType : std::uint8_t { kF16, kBF16, kF32, kF64 };

std::size_t ElementSize(FloatType type);
std::string_view FloatTypeName(FloatType type);  // "float32", ...

// The index of the first element of `bytes` (whole elements only; a partial tail is
// ignored) whose exponent bits are all ones — NaN or ±Inf — or nullopt.
std::optional<std::uint64_t> FirstNonFinite(FloatType type, std::span<const std::byte> bytes);

// What the element at the start of `bytes` is: "NaN", "+Inf", "-Inf" or "finite".
std::string_view ClassifyElement(FloatType type, std::span<const std::byte> bytes);

}  // namespace spotvisor::checkpoint

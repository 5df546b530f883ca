// CRC-32 with the zlib/ZIP polynomial (reflected 0xEDB88320), as every ZIP entry of a
// torch.save file stores it. Picks a carry-less-multiply kernel at run time (VPCLMULQDQ,
// else PCLMULQDQ, else slice-by-8 tables). Pure functions, any thread.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string_view>

namespace spotvisor::checkpoint {

// zlib semantics: Crc32(0, data) is the CRC of data; Crc32(Crc32(0, a), b) that of a+b.
std::uint32_t Crc32(std::uint32_t crc, const void* data, std::size_t size);

// The CRC of A+B from crc_a = CRC(A), crc_b = CRC(B) and B's length (zlib crc32_combine).
std::uint32_t Crc32Combine(std::uint32_t crc_a, std::uint32_t crc_b, std::uint64_t size_b);

// The same with a named kernel ("table", "pclmulqdq", "vpclmulqdq"); nullopt when this CPU
// lacks it. For tests and benchmarks.
std::optional<std::uint32_t> Crc32WithKernel(std::string_view kernel, std::uint32_t crc, const void* data,
                                             std::size_t size);

// "vpclmulqdq", "pclmulqdq" or "table": the kernel Crc32 uses on this CPU.
std::string_view Crc32Kernel();

}  // namespace spotvisor::checkpoint

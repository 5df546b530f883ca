// CRC-32 kernels: slice-by-8 tables everywhere, and on x86-64 carry-less-multiply folding
// (Gopal et al., "Fast CRC Computation Using PCLMULQDQ", bit-reflected form) with 128- or
// 512-bit lanes, chosen once per process. Fold constants are derived at compile time.
#include "spotvisor/checkpoint/crc32.hpp"

#include <array>
#include <cstring>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

namespace spotvisor::checkpoint {
namespace {

constexpr std::uint32_t kPoly = 0xEDB88320u;  // reflected 0x04C11DB7

enum class Kernel { kTable, kPclmul, kVpclmul };

using Tables = std::array<std::array<std::uint32_t, 256>, 8>;

constexpr Tables MakeTables() {
  Tables t{};
  for (std::uint32_t i = 0; i < 256; ++i) {
    std::uint32_t c = i;
    for (int k = 0; k < 8; ++k) c = (c & 1) ? (c >> 1) ^ kPoly : c >> 1;
    t[0][i] = c;
  }
  for (std::size_t i = 0; i < 256; ++i) {
    for (std::size_t s = 1; s < 8; ++s) t[s][i] = (t[s - 1][i] >> 8) ^ t[0][t[s - 1][i] & 0xFF];
  }
  return t;
}
constexpr Tables kTables = MakeTables();

// `c` is the running register (already inverted); returns it updated.
std::uint32_t TableUpdate(std::uint32_t c, const unsigned char* p, std::size_t n) {
  while (n >= 8) {
    std::uint32_t lo;
    std::uint32_t hi;
    std::memcpy(&lo, p, 4);
    std::memcpy(&hi, p + 4, 4);
    lo ^= c;
    c = kTables[7][lo & 0xFF] ^ kTables[6][(lo >> 8) & 0xFF] ^ kTables[5][(lo >> 16) & 0xFF] ^ kTables[4][lo >> 24] ^
        kTables[3][hi & 0xFF] ^ kTables[2][(hi >> 8) & 0xFF] ^ kTables[1][(hi >> 16) & 0xFF] ^ kTables[0][hi >> 24];
    p += 8;
    n -= 8;
  }
  while (n--) c = (c >> 8) ^ kTables[0][(c ^ *p++) & 0xFF];
  return c;
}

// x^n mod P in the reflected domain, shifted left by one: the folding constant for n.
constexpr std::uint64_t FoldConstant(unsigned n) {
  std::uint64_t r = 1;
  for (unsigned i = 0; i < n; ++i) {
    r <<= 1;
    if (r & (1ull << 32)) r ^= 0x104C11DB7ull;
  }
  std::uint64_t reflected = 0;
  for (int b = 0; b < 32; ++b) {
    if (r & (1ull << b)) reflected |= 1ull << (31 - b);
  }
  return reflected << 1;
}
static_assert(FoldConstant(544) == 0x154442bd4ull, "64-byte fold constant (Intel paper k1)");
static_assert(FoldConstant(96) == 0xccaa009eull, "16-byte fold constant (Intel paper k4)");

#if defined(__x86_64__)
#define SPOTVISOR_PCLMUL __attribute__((target("sse4.1,pclmul")))
#define SPOTVISOR_VPCLMUL __attribute__((target("avx512f,avx512vl,vpclmulqdq,sse4.1,pclmul")))

constexpr std::uint64_t k128Lo = FoldConstant(128 + 32);
constexpr std::uint64_t k128Hi = FoldConstant(128 - 32);
constexpr std::uint64_t k512Lo = FoldConstant(512 + 32);
constexpr std::uint64_t k512Hi = FoldConstant(512 - 32);
constexpr std::uint64_t k2048Lo = FoldConstant(2048 + 32);
constexpr std::uint64_t k2048Hi = FoldConstant(2048 - 32);
constexpr std::uint64_t k64 = FoldConstant(64);
constexpr std::uint64_t kBarrettMu = 0x1F7011641ull;  // floor(x^64 / P), reflected
constexpr std::uint64_t kBarrettP = 0x1DB710641ull;   // P, reflected, 33 bits

SPOTVISOR_PCLMUL inline __m128i Load128(const unsigned char* at) {
  return _mm_loadu_si128(reinterpret_cast<const __m128i*>(at));
}

SPOTVISOR_PCLMUL inline __m128i Fold128(__m128i acc, __m128i k, __m128i next) {
  const __m128i lo = _mm_clmulepi64_si128(acc, k, 0x00);
  const __m128i hi = _mm_clmulepi64_si128(acc, k, 0x11);
  return _mm_xor_si128(_mm_xor_si128(lo, hi), next);
}

// Reduces a 128-bit remainder to the 32-bit CRC register.
SPOTVISOR_PCLMUL std::uint32_t Reduce128(__m128i x1) {
  const __m128i mask32 = _mm_setr_epi32(~0, 0, ~0, 0);
  __m128i k = _mm_set_epi64x(static_cast<long long>(k128Hi), static_cast<long long>(k128Lo));
  __m128i x2 = _mm_clmulepi64_si128(x1, k, 0x10);
  x1 = _mm_xor_si128(_mm_srli_si128(x1, 8), x2);
  k = _mm_set_epi64x(0, static_cast<long long>(k64));
  x2 = _mm_srli_si128(x1, 4);
  x1 = _mm_xor_si128(_mm_clmulepi64_si128(_mm_and_si128(x1, mask32), k, 0x00), x2);
  k = _mm_set_epi64x(static_cast<long long>(kBarrettMu), static_cast<long long>(kBarrettP));
  x2 = _mm_clmulepi64_si128(_mm_and_si128(x1, mask32), k, 0x10);
  x2 = _mm_clmulepi64_si128(_mm_and_si128(x2, mask32), k, 0x00);
  return static_cast<std::uint32_t>(_mm_extract_epi32(_mm_xor_si128(x1, x2), 1));
}

// Folds 16-byte blocks into `x1` until fewer than 16 bytes remain; returns the register.
SPOTVISOR_PCLMUL std::uint32_t Finish128(__m128i x1, const unsigned char*& p, std::size_t& n) {
  const __m128i k = _mm_set_epi64x(static_cast<long long>(k128Hi), static_cast<long long>(k128Lo));
  while (n >= 16) {
    x1 = Fold128(x1, k, _mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
    p += 16;
    n -= 16;
  }
  return Reduce128(x1);
}

// Needs n >= 64.
SPOTVISOR_PCLMUL std::uint32_t PclmulUpdate(std::uint32_t c, const unsigned char*& p, std::size_t& n) {
  __m128i x1 = _mm_xor_si128(Load128(p), _mm_cvtsi32_si128(static_cast<int>(c)));
  __m128i x2 = Load128(p + 16);
  __m128i x3 = Load128(p + 32);
  __m128i x4 = Load128(p + 48);
  p += 64;
  n -= 64;
  const __m128i k4 = _mm_set_epi64x(static_cast<long long>(k512Hi), static_cast<long long>(k512Lo));
  while (n >= 64) {
    x1 = Fold128(x1, k4, Load128(p));
    x2 = Fold128(x2, k4, Load128(p + 16));
    x3 = Fold128(x3, k4, Load128(p + 32));
    x4 = Fold128(x4, k4, Load128(p + 48));
    p += 64;
    n -= 64;
  }
  const __m128i k1 = _mm_set_epi64x(static_cast<long long>(k128Hi), static_cast<long long>(k128Lo));
  x1 = Fold128(x1, k1, x2);
  x1 = Fold128(x1, k1, x3);
  x1 = Fold128(x1, k1, x4);
  return Finish128(x1, p, n);
}

SPOTVISOR_VPCLMUL inline __m512i Load512(const unsigned char* at) { return _mm512_loadu_si512(at); }

SPOTVISOR_VPCLMUL inline __m512i Fold512(__m512i acc, __m512i k, __m512i next) {
  const __m512i lo = _mm512_clmulepi64_epi128(acc, k, 0x00);
  const __m512i hi = _mm512_clmulepi64_epi128(acc, k, 0x11);
  return _mm512_ternarylogic_epi64(lo, hi, next, 0x96);  // lo ^ hi ^ next
}

SPOTVISOR_VPCLMUL inline __m512i Broadcast(std::uint64_t lo, std::uint64_t hi) {
  const auto l = static_cast<long long>(lo);
  const auto h = static_cast<long long>(hi);
  return _mm512_set_epi64(h, l, h, l, h, l, h, l);
}

// Needs n >= 256.
SPOTVISOR_VPCLMUL std::uint32_t VpclmulUpdate(std::uint32_t c, const unsigned char*& p, std::size_t& n) {
  __m512i z0 = _mm512_xor_si512(Load512(p), _mm512_zextsi128_si512(_mm_cvtsi32_si128(static_cast<int>(c))));
  __m512i z1 = Load512(p + 64);
  __m512i z2 = Load512(p + 128);
  __m512i z3 = Load512(p + 192);
  p += 256;
  n -= 256;
  const __m512i k4 = Broadcast(k2048Lo, k2048Hi);
  while (n >= 256) {
    z0 = Fold512(z0, k4, Load512(p));
    z1 = Fold512(z1, k4, Load512(p + 64));
    z2 = Fold512(z2, k4, Load512(p + 128));
    z3 = Fold512(z3, k4, Load512(p + 192));
    p += 256;
    n -= 256;
  }
  const __m512i k1 = Broadcast(k512Lo, k512Hi);
  z0 = Fold512(z0, k1, z1);
  z0 = Fold512(z0, k1, z2);
  z0 = Fold512(z0, k1, z3);
  while (n >= 64) {
    z0 = Fold512(z0, k1, Load512(p));
    p += 64;
    n -= 64;
  }
  const __m128i k = _mm_set_epi64x(static_cast<long long>(k128Hi), static_cast<long long>(k128Lo));
  alignas(64) unsigned char lanes[64];  // (GCC 12 warns on _mm512_extracti32x4_epi32)
  _mm512_store_si512(lanes, z0);
  __m128i x = Load128(lanes);
  x = Fold128(x, k, Load128(lanes + 16));
  x = Fold128(x, k, Load128(lanes + 32));
  x = Fold128(x, k, Load128(lanes + 48));
  return Finish128(x, p, n);
}

Kernel DetectKernel() {
  __builtin_cpu_init();
  if (__builtin_cpu_supports("vpclmulqdq") && __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512vl") &&
      __builtin_cpu_supports("pclmul")) {
    return Kernel::kVpclmul;
  }
  if (__builtin_cpu_supports("pclmul") && __builtin_cpu_supports("sse4.1")) return Kernel::kPclmul;
  return Kernel::kTable;
}

const Kernel kKernel = DetectKernel();
#else
const Kernel kKernel = Kernel::kTable;
#endif

// a * b mod P, both reflected (zlib multmodp).
constexpr std::uint32_t MultModP(std::uint32_t a, std::uint32_t b) {
  std::uint32_t m = 1u << 31;
  std::uint32_t p = 0;
  for (;;) {
    if (a & m) {
      p ^= b;
      if ((a & (m - 1)) == 0) break;
    }
    m >>= 1;
    b = (b & 1) ? (b >> 1) ^ kPoly : b >> 1;
  }
  return p;
}

constexpr std::array<std::uint32_t, 32> MakeX2nTable() {
  std::array<std::uint32_t, 32> t{};
  std::uint32_t p = 1u << 30;  // x^1
  t[0] = p;
  for (std::size_t n = 1; n < 32; ++n) t[n] = p = MultModP(p, p);
  return t;
}
constexpr auto kX2n = MakeX2nTable();

}  // namespace

namespace {
std::uint32_t Crc32With(Kernel kernel, std::uint32_t crc, const void* data, std::size_t size) {
  const auto* p = static_cast<const unsigned char*>(data);
  std::uint32_t c = ~crc;
#if defined(__x86_64__)
  if (kernel == Kernel::kVpclmul && size >= 256) {
    c = VpclmulUpdate(c, p, size);
  } else if (kernel != Kernel::kTable && size >= 64) {
    c = PclmulUpdate(c, p, size);
  }
#endif
  return ~TableUpdate(c, p, size);
}
}  // namespace

std::uint32_t Crc32(std::uint32_t crc, const void* data, std::size_t size) {
  return Crc32With(kKernel, crc, data, size);
}

std::optional<std::uint32_t> Crc32WithKernel(std::string_view kernel, std::uint32_t crc, const void* data,
                                             std::size_t size) {
  if (kernel == "table") return Crc32With(Kernel::kTable, crc, data, size);
#if defined(__x86_64__)
  if (kernel == "pclmulqdq" && kKernel != Kernel::kTable) {
    return Crc32With(Kernel::kPclmul, crc, data, size);
  }
  if (kernel == "vpclmulqdq" && kKernel == Kernel::kVpclmul) {
    return Crc32With(Kernel::kVpclmul, crc, data, size);
  }
#endif
  return std::nullopt;
}

std::uint32_t Crc32Combine(std::uint32_t crc_a, std::uint32_t crc_b, std::uint64_t size_b) {
  std::uint32_t x = 1u << 31;  // x^0
  unsigned k = 3;              // bytes -> bits
  for (std::uint64_t n = size_b; n != 0; n >>= 1, ++k) {
    if (n & 1) x = MultModP(kX2n[k & 31], x);
  }
  return MultModP(x, crc_a) ^ crc_b;
}

std::string_view Crc32Kernel() {
#if defined(__x86_64__)
  switch (kKernel) {
    case Kernel::kVpclmul:
      return "vpclmulqdq";
    case Kernel::kPclmul:
      return "pclmulqdq";
    case Kernel::kTable:
      break;
  }
#endif
  return "table";
}

}  // namespace spotvisor::checkpoint

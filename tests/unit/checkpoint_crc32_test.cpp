// CRC-32 kernels against the standard check value and each other, Crc32Combine, the hash
// pool, and chunked range CRCs. Pure, fast.
#include <gtest/gtest.h>

#include <atomic>
#include <cstring>
#include <random>
#include <vector>

#include "spotvisor/checkpoint/byte_source.hpp"
#include "spotvisor/checkpoint/crc32.hpp"
#include "spotvisor/checkpoint/hash_pool.hpp"

namespace spotvisor::checkpoint {
namespace {

std::vector<unsigned char> RandomBytes(std::size_t n, unsigned seed) {
  std::mt19937 rng(seed);
  std::vector<unsigned char> v(n);
  for (auto& b : v) b = static_cast<unsigned char>(rng());
  return v;
}

TEST(CheckpointCrc32, CheckValue) {
  EXPECT_EQ(Crc32(0, "123456789", 9), 0xCBF43926u);
  EXPECT_EQ(Crc32(0, "", 0), 0u);
  EXPECT_NE(Crc32Kernel(), "");
}

TEST(CheckpointCrc32, EveryKernelAgreesAtEveryLengthAndAlignment) {
  const auto data = RandomBytes(4096 + 64, 1);
  for (const char* kernel : {"pclmulqdq", "vpclmulqdq"}) {
    if (!Crc32WithKernel(kernel, 0, data.data(), 1)) continue;  // this CPU lacks it
    for (std::size_t len = 0; len <= 1100; len += (len < 300 ? 1 : 37)) {
      for (std::size_t off : {0u, 1u, 7u, 33u}) {
        const std::uint32_t seed = static_cast<std::uint32_t>(len * 2654435761u);
        ASSERT_EQ(*Crc32WithKernel(kernel, seed, data.data() + off, len),
                  *Crc32WithKernel("table", seed, data.data() + off, len))
            << kernel << " len=" << len << " off=" << off;
      }
    }
  }
}

TEST(CheckpointCrc32, CombineEqualsConcatenation) {
  const auto data = RandomBytes(100000, 2);
  for (std::size_t split : {0u, 1u, 63u, 4096u, 99999u, 100000u}) {
    const auto a = Crc32(0, data.data(), split);
    const auto b = Crc32(0, data.data() + split, data.size() - split);
    EXPECT_EQ(Crc32Combine(a, b, data.size() - split), Crc32(0, data.data(), data.size())) << split;
  }
}

TEST(CheckpointHashPool, RunsEveryTaskOnceAndCanBeReused) {
  HashPool pool(3);
  for (int round = 0; round < 20; ++round) {
    std::vector<std::atomic<int>> hits(257);
    pool.ParallelFor(hits.size(), [&](std::size_t i) { hits[i].fetch_add(1); });
    for (auto& h : hits) ASSERT_EQ(h.load(), 1);
  }
  HashPool none(0);
  int sum = 0;
  none.ParallelFor(10, [&](std::size_t i) { sum += static_cast<int>(i); });
  EXPECT_EQ(sum, 45);
}

TEST(CheckpointCrc32, RangesSplitIntoChunksMatchWholeRanges) {
  const auto data = RandomBytes((20u << 20) + 123, 3);  // crosses several 8 MiB chunks
  MemorySource src({reinterpret_cast<const std::byte*>(data.data()), data.size()}, "mem");
  HashPool pool(2);
  const std::vector<ByteRange> ranges = {{0, data.size()}, {5, 0}, {1000, (9u << 20)}, {17, 4}};
  auto crcs = Crc32OfRanges(src, ranges, &pool);
  ASSERT_TRUE(crcs) << crcs.error().message;
  for (std::size_t i = 0; i < ranges.size(); ++i) {
    EXPECT_EQ((*crcs)[i], Crc32(0, data.data() + ranges[i].offset, ranges[i].length)) << i;
  }
  const std::vector<ByteRange> past_end = {{data.size() - 1, 2}};
  auto bad = Crc32OfRanges(src, past_end, &pool);
  ASSERT_FALSE(bad);
  EXPECT_NE(bad.error().message.find("past the end"), std::string::npos);
}

}  // namespace
}  // namespace spotvisor::checkpoint

// The content check's parts without torch: the NaN/Inf kernel on every dtype and at every
// position of its 64-element blocks, and a FiniteScan over a safetensors file fed whole or
// in small blocks. Real torch files are checked in tests/formats/test_content.py.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>

#include "checkpoint_test_files.hpp"
#include "spotvisor/checkpoint/byte_source.hpp"
#include "spotvisor/checkpoint/content_check.hpp"
#include "spotvisor/checkpoint/float_scan.hpp"

namespace spotvisor::checkpoint {
namespace {

template <typename T>
std::string Bytes(const std::vector<T>& values) {
  std::string out(values.size() * sizeof(T), '\0');
  std::memcpy(out.data(), values.data(), out.size());
  return out;
}

std::span<const std::byte> View(const std::string& s) {
  return {reinterpret_cast<const std::byte*>(s.data()), s.size()};
}

TEST(CheckpointContent, Float32FindsTheFirstNonFiniteAtAnyPosition) {
  for (std::size_t at : {0u, 1u, 63u, 64u, 65u, 127u, 200u, 299u}) {
    std::vector<float> v(300, 1.5f);
    v[at] = std::numeric_limits<float>::quiet_NaN();
    if (at + 5 < v.size()) v[at + 5] = std::numeric_limits<float>::infinity();
    const auto bytes = Bytes(v);
    EXPECT_EQ(FirstNonFinite(FloatType::kF32, View(bytes)), at) << at;
  }
  const auto finite = Bytes(std::vector<float>(300, std::numeric_limits<float>::max()));
  EXPECT_EQ(FirstNonFinite(FloatType::kF32, View(finite)), std::nullopt);
}

TEST(CheckpointContent, EveryDtypeAndWhatTheElementIs) {
  const auto f64 = Bytes(std::vector<double>{1.0, -std::numeric_limits<double>::infinity()});
  EXPECT_EQ(FirstNonFinite(FloatType::kF64, View(f64)), 1u);
  EXPECT_EQ(ClassifyElement(FloatType::kF64, View(f64).subspan(8)), "-Inf");
  // float16: 0x3c00 = 1.0, 0x7c00 = +Inf, 0x7e00 = NaN, 0x7bff = 65504 (the largest finite).
  const auto f16 = Bytes(std::vector<std::uint16_t>{0x3c00, 0x7bff, 0x7e00, 0x7c00});
  EXPECT_EQ(FirstNonFinite(FloatType::kF16, View(f16)), 2u);
  EXPECT_EQ(ClassifyElement(FloatType::kF16, View(f16).subspan(4)), "NaN");
  EXPECT_EQ(ClassifyElement(FloatType::kF16, View(f16).subspan(6)), "+Inf");
  // bfloat16: 0x3f80 = 1.0, 0x7f7f = the largest finite, 0xff80 = -Inf.
  const auto bf16 = Bytes(std::vector<std::uint16_t>{0x3f80, 0x7f7f, 0xff80});
  EXPECT_EQ(FirstNonFinite(FloatType::kBF16, View(bf16)), 2u);
  EXPECT_EQ(ClassifyElement(FloatType::kBF16, View(bf16).subspan(4)), "-Inf");
  EXPECT_EQ(ClassifyElement(FloatType::kBF16, View(bf16)), "finite");
  // A partial trailing element is not an element.
  const auto partial = f16.substr(0, 3);
  EXPECT_EQ(FirstNonFinite(FloatType::kF16, View(partial)), std::nullopt);
}

// A safetensors file whose second tensor holds a NaN; integers full of 0xff are skipped.
std::string NanFile(std::size_t nan_at) {
  std::vector<float> b(1000, 0.25f);
  b[nan_at] = std::nanf("");
  const std::string data = std::string(12, '\xff') + Bytes(std::vector<float>(5, 2.0f)) + Bytes(b);
  const std::string header = R"({"ints":{"dtype":"I32","shape":[3],"data_offsets":[0,12]},)"
                             R"("layer.0.weight":{"dtype":"F32","shape":[5],"data_offsets":[12,32]},)"
                             R"("layer.1.weight":{"dtype":"F32","shape":[1000],"data_offsets":[32,4032]}})";
  return testfiles::Safetensors(header, data);
}

TEST(CheckpointContent, SafetensorsScanNamesTheTensorAndElement) {
  const std::string file = NanFile(777);
  MemorySource src(View(file), "model.safetensors");
  auto tensors = SafetensorsTensors(src);
  ASSERT_TRUE(tensors) << tensors.error().message;
  ASSERT_EQ(tensors->size(), 2u);  // the I32 tensor is not floating point
  const FiniteScan scan(std::move(*tensors));
  auto st = ReadAndJudge(src, scan, nullptr);
  ASSERT_FALSE(st);
  EXPECT_NE(st.error().message.find("model.safetensors: tensor 'layer.1.weight' (float32) holds NaN at element 777"),
            std::string::npos)
      << st.error().message;
}

TEST(CheckpointContent, ManySmallBlocksFindTheLastElement) {
  const std::string file = NanFile(999);  // the last element of the last tensor
  MemorySource src(View(file), "m");
  auto tensors = SafetensorsTensors(src);
  ASSERT_TRUE(tensors);
  const FiniteScan scan(std::move(*tensors));
  // As the CRC pass hands them over: each range from its start, in small blocks (12 bytes
  // here, 256 KiB there), in reverse order as pool threads may.
  const auto ranges = scan.Ranges();
  for (auto r = ranges.rbegin(); r != ranges.rend(); ++r) {
    for (std::uint64_t at = r->offset; at < r->offset + r->length; at += 12) {
      const std::uint64_t n = std::min<std::uint64_t>(12, r->offset + r->length - at);
      (*scan.visitor())(at, View(file).subspan(at, n));
    }
  }
  auto st = scan.Verdict(src);
  ASSERT_FALSE(st);
  EXPECT_NE(st.error().message.find("'layer.1.weight' (float32) holds NaN at element 999"), std::string::npos)
      << st.error().message;
}

TEST(CheckpointContent, FiniteFileIsGood) {
  std::vector<float> b(64, -0.0f);
  const std::string file =
      testfiles::Safetensors(R"({"w":{"dtype":"F32","shape":[64],"data_offsets":[0,256]}})", Bytes(b));
  MemorySource src(View(file), "m");
  auto tensors = SafetensorsTensors(src);
  ASSERT_TRUE(tensors);
  EXPECT_TRUE(ReadAndJudge(src, FiniteScan(std::move(*tensors)), nullptr));
}

}  // namespace
}  // namespace spotvisor::checkpoint

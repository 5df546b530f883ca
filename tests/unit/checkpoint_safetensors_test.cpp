// safetensors header validation against files written per the spec by test code: a good
// file and every rule of the reference validator, each with its reason.
#include <gtest/gtest.h>

#include "checkpoint_test_files.hpp"
#include "spotvisor/checkpoint/byte_source.hpp"
#include "spotvisor/checkpoint/safetensors_check.hpp"

namespace spotvisor::checkpoint {
namespace {

using testfiles::Safetensors;

std::string Why(const std::string& bytes) {
  MemorySource src({reinterpret_cast<const std::byte*>(bytes.data()), bytes.size()}, "model.safetensors");
  auto r = CheckSafetensors(src);
  return r ? "" : r.error().message;
}

const std::string kHeader =
    R"({"__metadata__":{"format":"pt"},"b":{"dtype":"F16","shape":[2],"data_offsets":[16,20]},)"
    R"("a":{"dtype":"F32","shape":[2,2],"data_offsets":[0,16]},"e":{"dtype":"I8","shape":[0],"data_offsets":[20,20]}})";

TEST(CheckpointSafetensors, GoodFilePasses) {
  const std::string file = Safetensors(kHeader, std::string(20, '\x01'));
  MemorySource src({reinterpret_cast<const std::byte*>(file.data()), file.size()}, "m");
  auto r = CheckSafetensors(src);
  ASSERT_TRUE(r) << r.error().message;
  EXPECT_EQ(r->tensors, 3u);
  EXPECT_EQ(r->data_bytes, 20u);
}

TEST(CheckpointSafetensors, SizeRulesCatchTruncationAndTrailingBytes) {
  EXPECT_NE(Why(Safetensors(kHeader, std::string(19, 'x'))).find("(truncated)"), std::string::npos);
  EXPECT_NE(Why(Safetensors(kHeader, std::string(21, 'x'))).find("(trailing bytes)"), std::string::npos);
  EXPECT_NE(Why("abc").find("too short"), std::string::npos);
  const std::string file = Safetensors(kHeader, std::string(20, 'x'));
  EXPECT_NE(Why(file.substr(0, 30)).find("runs past the end"), std::string::npos);
  std::string huge = file;
  huge[7] = '\x01';
  EXPECT_NE(Why(huge).find("exceeds 100 MB"), std::string::npos);
}

TEST(CheckpointSafetensors, EveryHeaderRuleHasItsReason) {
  const std::string data(16, 'x');
  auto why = [&](const std::string& h) { return Why(Safetensors(h, data)); };
  EXPECT_NE(
      why(R"({"a":{"dtype":"F32","shape":[2,2],"data_offsets":[0,16]},"a":{"dtype":"F32","shape":[2,2],"data_offsets":[0,16]}})")
          .find("'a' appears twice"),
      std::string::npos);
  EXPECT_NE(why(R"({"a":{"dtype":"Q7","shape":[4],"data_offsets":[0,16]}})").find("unknown dtype 'Q7'"),
            std::string::npos);
  EXPECT_NE(why(R"({"a":{"dtype":"F32","shape":[-4],"data_offsets":[0,16]}})").find("not a non-negative integer"),
            std::string::npos);
  EXPECT_NE(why(R"({"a":{"dtype":"F32","shape":[3],"data_offsets":[0,16]}})").find("needs 12"), std::string::npos);
  EXPECT_NE(
      why(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},"b":{"dtype":"F32","shape":[2],"data_offsets":[4,12]}})")
          .find("(overlap)"),
      std::string::npos);
  EXPECT_NE(why(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[8,16]}})").find("(gap)"), std::string::npos);
  EXPECT_NE(why(R"({"a":{"dtype":"F32","shape":[4294967296,4294967296],"data_offsets":[0,16]}})").find("overflows"),
            std::string::npos);
  EXPECT_NE(why(R"({"a":{"dtype":"F4","shape":[3],"data_offsets":[0,16]}})").find("misaligned"), std::string::npos);
  EXPECT_NE(
      why(R"({"__metadata__":{"k":1},"a":{"dtype":"F32","shape":[4],"data_offsets":[0,16]}})").find("is not a string"),
      std::string::npos);
  EXPECT_NE(why(R"({"a":{"dtype":"F32","shape":[4],"data_offsets":[16,0]}})").find("begin > end"), std::string::npos);
  EXPECT_NE(why(R"({"a":{"dtype":"F32","shape":[4],"data_offsets":[0,16],"x":1}})").find("unknown field 'x'"),
            std::string::npos);
  EXPECT_NE(why(R"([1,2])").find("does not start with '{'"), std::string::npos);
  EXPECT_NE(why("{\"a\xff\":1}").find("not valid UTF-8 JSON"), std::string::npos);
  EXPECT_NE(why(R"({"a":[[[[[[1]]]]]]})").find("nesting"), std::string::npos);
}

TEST(CheckpointSafetensors, NestingDepth) {
  EXPECT_EQ(JsonNestingDepth(R"({"a":[1,{"b":"]]]"}]})"), 3u);
  EXPECT_EQ(JsonNestingDepth("{"), SIZE_MAX);
  EXPECT_EQ(JsonNestingDepth("}"), SIZE_MAX);
}

}  // namespace
}  // namespace spotvisor::checkpoint

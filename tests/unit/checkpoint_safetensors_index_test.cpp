// Sharded weight sets as transformers' save_pretrained writes them (shards, then the index):
// a complete set passes; a missing shard, a missing index, a weight_map entry its shard does
// not hold, a tensor the weight_map does not list are each named.
#include <gtest/gtest.h>

#include <set>

#include "checkpoint_test_files.hpp"
#include "spotvisor/checkpoint/safetensors_index.hpp"
#include "support/test_support.hpp"

namespace spotvisor::checkpoint {
namespace {

using spotvisor::testing::TempDir;
using spotvisor::testing::WriteFile;
using testfiles::Safetensors;

const char* kShard1 = "model-00001-of-00002.safetensors";
const char* kShard2 = "model-00002-of-00002.safetensors";
const char* kIndex = "model.safetensors.index.json";

class ShardedWeights : public ::testing::Test {
 protected:
  void SetUp() override {
    WriteFile(dir_ / kShard1, Safetensors(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})", "12345678"));
    WriteFile(dir_ / kShard2, Safetensors(R"({"b":{"dtype":"I8","shape":[4],"data_offsets":[0,4]}})", "1234"));
    WriteIndex(R"({"a":"model-00001-of-00002.safetensors","b":"model-00002-of-00002.safetensors"})");
  }
  void WriteIndex(const std::string& weight_map) {
    WriteFile(dir_ / kIndex, R"({"metadata":{"total_size":12},"weight_map":)" + weight_map + "}");
  }
  std::string Why(bool read_shards = true) {
    std::set<std::string> names;
    for (const auto& e : std::filesystem::directory_iterator(dir_.path())) names.insert(e.path().filename().string());
    auto st = CheckShardedWeights(dir_.path(), names, read_shards);
    return st ? "" : st.error().message;
  }
  TempDir dir_;
};

TEST_F(ShardedWeights, CompleteSetPasses) { EXPECT_EQ(Why(), ""); }

TEST_F(ShardedWeights, MissingShardNamesTheWeightMapEntry) {
  std::filesystem::remove(dir_ / kShard2);
  const std::string why = Why(/*read_shards=*/false);
  EXPECT_NE(why.find(kShard2), std::string::npos) << why;
  EXPECT_NE(why.find("missing shard"), std::string::npos) << why;
  EXPECT_NE(why.find("weight_map entry 'b'"), std::string::npos) << why;
}

TEST_F(ShardedWeights, MissingIndexIsAnUnfinishedSave) {
  std::filesystem::remove(dir_ / kIndex);
  const std::string why = Why();
  EXPECT_NE(why.find(kIndex), std::string::npos) << why;
  EXPECT_NE(why.find("did not finish"), std::string::npos) << why;
}

TEST_F(ShardedWeights, MissingShardOfTheSeriesWithoutIndex) {
  std::filesystem::remove(dir_ / kIndex);
  std::filesystem::remove(dir_ / kShard1);
  const std::string why = Why();
  EXPECT_NE(why.find("missing shard 1 of 2"), std::string::npos) << why;
}

TEST_F(ShardedWeights, EntryNotInItsShardIsNamedWithItsOffset) {
  WriteIndex(R"({"a":"model-00002-of-00002.safetensors","b":"model-00002-of-00002.safetensors"})");
  const std::string why = Why();
  EXPECT_NE(why.find("weight_map entry 'a' names shard 'model-00002-of-00002.safetensors', whose header has no such"),
            std::string::npos)
      << why;
  EXPECT_NE(why.find("(offset "), std::string::npos) << why;
  EXPECT_EQ(Why(/*read_shards=*/false), "");  // structure: names only
}

TEST_F(ShardedWeights, TensorTheWeightMapDoesNotListIsNamed) {
  WriteIndex(R"({"a":"model-00001-of-00002.safetensors"})");
  const std::string why = Why();
  EXPECT_NE(why.find("holds tensor 'b'"), std::string::npos) << why;
}

TEST_F(ShardedWeights, IndexThatIsNotJsonNamesTheOffset) {
  WriteFile(dir_ / kIndex, R"({"weight_map": {"a": "model-00001-of-00002.safetensors",)");
  const std::string why = Why();
  EXPECT_NE(why.find(kIndex), std::string::npos) << why;
  EXPECT_NE(why.find("(offset "), std::string::npos) << why;
}

}  // namespace
}  // namespace spotvisor::checkpoint

// The drill's "identical" on checkpoints: every archive of a DCP shard is compared (not
// only the last), byte blocks are compared in place, and a difference names its payload.
#include "spotvisor/drill/drill_compare.hpp"

#include <gtest/gtest.h>

#include "checkpoint_test_files.hpp"
#include "support/test_support.hpp"

namespace spotvisor::drill {
namespace {

using checkpoint::testfiles::Zip;
using testing::TempDir;
using testing::WriteFile;

// A DCP shard as torch writes it: BYTE_IO bytes, then one torch.save archive per tensor.
std::string Shard(const std::string& first_tensor, const std::string& second_tensor) {
  return "raw-bytes-item" +
         Zip({{"archive/data.pkl", "\x80\x02K\x01."}, {"archive/data/0", first_tensor}, {"archive/version", "3\n"}}) +
         Zip({{"archive/data.pkl", "\x80\x02K\x02."}, {"archive/data/0", second_tensor}, {"archive/version", "3\n"}});
}

TEST(DrillCompare, EveryArchiveOfADcpShardIsCompared) {
  TempDir a, b;
  const std::string big(3 << 20, '\x11');  // more than one 1 MiB block
  for (auto* d : {&a, &b}) std::filesystem::create_directories(*d / "ckpt_step5");
  WriteFile(a / "ckpt_step5" / "__0_0.distcp", Shard(big, "second"));
  WriteFile(b / "ckpt_step5" / "__0_0.distcp", Shard(big, "second"));
  const Comparison same = CompareNewestCheckpoints(a.path(), b.path(), "ckpt_step{step}");
  EXPECT_TRUE(same.identical) << same.explanation;
  EXPECT_NE(same.explanation.find("(3 tensors)"), std::string::npos) << same.explanation;  // 2 archives + the bytes

  std::string changed = big;
  changed[(2 << 20) + 5] = '\x12';  // in the third block of the FIRST archive
  WriteFile(b / "ckpt_step5" / "__0_0.distcp", Shard(changed, "second"));
  const Comparison differs = CompareNewestCheckpoints(a.path(), b.path(), "ckpt_step{step}");
  EXPECT_FALSE(differs.identical);
  EXPECT_NE(differs.explanation.find("tensor payload __0_0.distcp:0:data/0 differs"), std::string::npos)
      << differs.explanation;
}

}  // namespace
}  // namespace spotvisor::drill

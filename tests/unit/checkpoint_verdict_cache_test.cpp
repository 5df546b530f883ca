// The verdict cache file: what is saved loads back (names and reasons with tabs,
// newlines and backslashes included); a key change, a cache of another dir or a damaged
// line is simply not used.
#include <gtest/gtest.h>

#include "spotvisor/checkpoint/verdict_cache.hpp"
#include "support/test_support.hpp"

namespace spotvisor::checkpoint {
namespace {

using config::ValidateLevel;

TEST(VerdictCache, RoundTripsAndRefusesWhatItCannotTrust) {
  testing::TempDir dir;
  const auto file = dir / "state" / "cache.tsv";
  const CacheKey key{747, 1796112385823848737, 10952897};
  {
    VerdictCache cache("/ckpt", file);
    cache.Put("step_1.pt", key, ValidateLevel::kFull, Verdict{true, "torch.save, 747 bytes", "torch.save"});
    cache.Put("odd\tname\\with\nbreaks", key, ValidateLevel::kFormat,
              Verdict{false, "entry 'a\tb': CRC\n", "torch.save"});
    ASSERT_TRUE(cache.Save().ok());
  }
  VerdictCache loaded("/ckpt", file);
  loaded.Load();
  ASSERT_EQ(loaded.size(), 2u);
  const auto good = loaded.Find("step_1.pt", key, ValidateLevel::kFull);
  ASSERT_TRUE(good.has_value());
  EXPECT_TRUE(good->good);
  EXPECT_EQ(good->reason, "torch.save, 747 bytes");
  const auto bad = loaded.Find("odd\tname\\with\nbreaks", key, ValidateLevel::kFull);
  ASSERT_TRUE(bad.has_value());
  EXPECT_FALSE(bad->good);
  EXPECT_EQ(bad->reason, "entry 'a\tb': CRC\n");
  EXPECT_FALSE(loaded.Find("step_1.pt", CacheKey{748, key.mtime_ns, key.inode}, ValidateLevel::kFull));

  VerdictCache other_dir("/elsewhere", file);
  other_dir.Load();
  EXPECT_EQ(other_dir.size(), 0u);

  std::string text = testing::ReadFile(file);
  text.insert(text.find('\n') + 1, "garbage line\nstep_9.pt\tx\t1\t2\tfull\t1\tf\tr\n");
  testing::WriteFile(file, text + "step_torn.pt\t1\t2\t3\tfull\t1");  // no final newline
  VerdictCache damaged("/ckpt", file);
  damaged.Load();
  EXPECT_EQ(damaged.size(), 2u);  // the two good lines; the others are not used
}

}  // namespace
}  // namespace spotvisor::checkpoint

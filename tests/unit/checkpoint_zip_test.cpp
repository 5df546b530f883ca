// The ZIP walker on archives built in memory: good ones (ZIP64 or not), and each kind of
// damage with the entry and offset it must name. DCP shards are checked in integration.
#include <gtest/gtest.h>

#include "checkpoint_test_files.hpp"
#include "spotvisor/checkpoint/byte_source.hpp"
#include "spotvisor/checkpoint/zip_archive.hpp"

namespace spotvisor::checkpoint {
namespace {

using testfiles::TorchEntries;
using testfiles::Zip;

// Index + layout + torch records + CRCs; the first failure's message, or "" when good.
std::string Check(const std::string& bytes) {
  MemorySource src({reinterpret_cast<const std::byte*>(bytes.data()), bytes.size()}, "m.pt");
  auto a = ReadZipIndex(src, bytes.size(), true);
  if (!a) return a.error().message;
  if (auto st = CheckZipLayout(src, *a); !st) return st.error().message;
  if (auto st = CheckTorchRecords(src, *a); !st) return st.error().message;
  if (auto st = VerifyZipCrcs(src, *a, nullptr); !st) return st.error().message;
  return "";
}

std::size_t Find(const std::string& hay, const std::string& needle, std::size_t nth = 0) {
  std::size_t at = hay.find(needle);
  while (nth-- > 0) at = hay.find(needle, at + 1);
  return at;
}

TEST(CheckpointZip, GoodArchivesPass) {
  EXPECT_EQ(Check(Zip(TorchEntries("m"))), "");
  EXPECT_EQ(Check(Zip(TorchEntries("archive"), /*zip64=*/false)), "");
  const std::string z = Zip(TorchEntries("m"));
  MemorySource src({reinterpret_cast<const std::byte*>(z.data()), z.size()}, "m.pt");
  auto a = ReadZipIndex(src, z.size(), true);
  ASSERT_TRUE(a);
  EXPECT_TRUE(a->zip64);
  EXPECT_EQ(a->entries.size(), 4u);
  EXPECT_EQ(a->start, 0u);
}

TEST(CheckpointZip, FlippedTensorByteFailsTheCrcNamingEntryAndOffset) {
  std::string z = Zip(TorchEntries("m"));
  const std::size_t at = Find(z, "tensor-bytes");
  z[at] ^= 0x01;
  const std::string why = Check(z);
  EXPECT_NE(why.find("entry 'm/data/0'"), std::string::npos) << why;
  EXPECT_NE(why.find("CRC-32 mismatch"), std::string::npos) << why;
  EXPECT_NE(why.find("(offset "), std::string::npos) << why;
}

TEST(CheckpointZip, TruncationAnywhereIsCaught) {
  const std::string z = Zip(TorchEntries("m"));
  for (std::size_t keep : {std::size_t{0}, std::size_t{10}, z.size() / 3, z.size() / 2, z.size() - 30, z.size() - 1}) {
    const std::string why = Check(z.substr(0, keep));
    EXPECT_NE(why, "") << keep;
    EXPECT_TRUE(why.find("end-of-central-directory") != std::string::npos || why.find("too short") != std::string::npos)
        << keep << ": " << why;
  }
}

TEST(CheckpointZip, DamagedLocalHeaderIsCaught) {
  std::string z = Zip(TorchEntries("m"));
  z[Find(z, "PK\x03\x04", 1)] = 'X';  // second local header signature
  const std::string why = Check(z);
  EXPECT_NE(why.find("entry 'm/data/0': local header signature is wrong"), std::string::npos) << why;
}

TEST(CheckpointZip, DamagedCentralDirectoryIsCaught) {
  std::string z = Zip(TorchEntries("m"));
  const std::size_t cd = Find(z, "PK\x01\x02", 0);
  std::string renamed = z;
  renamed[cd + 46] = 'X';  // first CD name 'm/data.pkl' -> 'X/data.pkl'
  EXPECT_NE(Check(renamed).find("local header names 'm/data.pkl' instead"), std::string::npos) << Check(renamed);
  std::string crc = z;
  crc[cd + 16] ^= 0x40;  // stored CRC of the first entry
  EXPECT_NE(Check(crc).find("data descriptor is missing or disagrees"), std::string::npos) << Check(crc);
  std::string sig = z;
  sig[cd + 1] = 'Q';
  EXPECT_NE(Check(sig).find("central directory entry 0 is missing or damaged"), std::string::npos) << Check(sig);
}

TEST(CheckpointZip, CompressedDuplicateAndMissingRecordsAreRefused) {
  std::string z = Zip(TorchEntries("m"));
  std::string compressed = z;
  compressed[Find(z, "PK\x01\x02") + 10] = 8;  // method deflate in the CD
  EXPECT_NE(Check(compressed).find("is compressed (method 8)"), std::string::npos);
  auto entries = TorchEntries("m");
  entries.push_back(entries[1]);
  EXPECT_NE(Check(Zip(entries)).find("name appears twice"), std::string::npos);
  auto no_pkl = TorchEntries("m");
  no_pkl.erase(no_pkl.begin());
  EXPECT_NE(Check(Zip(no_pkl)).find("has no m/data.pkl"), std::string::npos);
  auto mixed = TorchEntries("m");
  mixed.push_back({"other/x", "y"});
  EXPECT_NE(Check(Zip(mixed)).find("outside the archive folder 'm/'"), std::string::npos);
  auto bad_version = TorchEntries("m");
  bad_version.back().second = "x";
  EXPECT_NE(Check(Zip(bad_version)).find("version record is not a decimal number"), std::string::npos);
}

TEST(CheckpointZip, ArchivesBackToBackAreFoundFromTheEnd) {
  const std::string first = Zip(TorchEntries("archive"));
  const std::string second = Zip(TorchEntries("archive"), false);
  const std::string both = "raw-bytes-item" + first + second;
  MemorySource src({reinterpret_cast<const std::byte*>(both.data()), both.size()}, "__0_0.distcp");
  auto last = ReadZipIndex(src, both.size(), false);
  ASSERT_TRUE(last) << last.error().message;
  EXPECT_EQ(last->start, 14 + first.size());
  ASSERT_TRUE(CheckZipLayout(src, *last));
  auto prev = ReadZipIndex(src, last->start, false);
  ASSERT_TRUE(prev) << prev.error().message;
  EXPECT_EQ(prev->start, 14u);
  ASSERT_TRUE(CheckZipLayout(src, *prev));
  EXPECT_TRUE(VerifyZipCrcs(src, *prev, nullptr));
  EXPECT_FALSE(ReadZipIndex(src, prev->start, false));
}

}  // namespace
}  // namespace spotvisor::checkpoint

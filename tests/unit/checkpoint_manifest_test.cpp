// Manifest parsing (bounds, path traversal), sealing and verification against changed,
// missing and extra files, for directories and single files, XXH3-128 and CRC-32.
#include <gtest/gtest.h>

#include <cstdlib>
#include <fstream>

#include "checkpoint_test_files.hpp"
#include "spotvisor/checkpoint/crc32.hpp"
#include "spotvisor/checkpoint/hash_pool.hpp"
#include "spotvisor/checkpoint/manifest.hpp"
#include "support/test_support.hpp"

namespace spotvisor::checkpoint {
namespace {

namespace fs = std::filesystem;
using spotvisor::testing::TempDir;
using spotvisor::testing::WriteFile;

std::string Doc(const std::string& files, const std::string& algorithm = "xxh3-128") {
  return R"({"format":"spotvisor-manifest","version":1,"algorithm":")" + algorithm + R"(","files":[)" + files + "]}";
}
const std::string kHash(32, 'a');

TEST(CheckpointManifest, ParsesTheAgreedFormat) {
  auto m = ParseManifest(Doc(R"({"path":"model.pt","size":123,"hash":")" + kHash +
                             R"("},)"
                             R"({"path":"sub/opt.pt","size":0,"hash":")" +
                             kHash + R"("})"),
                         "m.json");
  ASSERT_TRUE(m) << m.error().message;
  EXPECT_EQ(m->algorithm, "xxh3-128");
  ASSERT_EQ(m->files.size(), 2u);
  EXPECT_EQ(m->files[1].path, "sub/opt.pt");
  auto again = ParseManifest(SerializeManifest(*m), "again");
  ASSERT_TRUE(again);
  EXPECT_EQ(again->files.size(), 2u);
}

TEST(CheckpointManifest, RejectsTraversalAndMalformedEntries) {
  auto why = [](const std::string& doc) {
    auto m = ParseManifest(doc, "m.json");
    return m ? std::string() : m.error().message;
  };
  const std::string h = R"(,"size":1,"hash":")" + kHash + R"("})";
  EXPECT_NE(why(Doc(R"({"path":"../evil")" + h)).find("contains '..'"), std::string::npos);
  EXPECT_NE(why(Doc(R"({"path":"a/../../evil")" + h)).find("contains '..'"), std::string::npos);
  EXPECT_NE(why(Doc(R"({"path":"/etc/passwd")" + h)).find("is absolute"), std::string::npos);
  EXPECT_NE(why(Doc(R"({"path":"a//b")" + h)).find("empty part"), std::string::npos);
  EXPECT_NE(why(Doc(R"({"path":"a")" + h + "," + R"({"path":"a")" + h)).find("listed twice"), std::string::npos);
  EXPECT_NE(why(Doc(R"({"path":"spotvisor.manifest.json")" + h)).find("the manifest itself"), std::string::npos);
  EXPECT_NE(why(Doc(R"({"path":"a","size":-1,"hash":")" + kHash + R"("})")).find("'size'"), std::string::npos);
  EXPECT_NE(why(Doc(R"({"path":"a","size":1,"hash":"ABC"})")).find("lowercase hex"), std::string::npos);
  EXPECT_NE(why(Doc("", "md5")).find("'algorithm'"), std::string::npos);
  EXPECT_NE(why("{").find("brackets do not balance"), std::string::npos);
  EXPECT_NE(why("{\"a\":}").find("not valid JSON"), std::string::npos);
  EXPECT_NE(why(R"({"format":"other","version":1})").find("'format'"), std::string::npos);
}

class ManifestFiles : public ::testing::Test {
 protected:
  void SetUp() override {
    ckpt_ = tmp_ / "checkpoint-10";
    fs::create_directories(ckpt_ / "sub");
    WriteFile(ckpt_ / "model.raw", std::string(100000, 'm'));
    WriteFile(ckpt_ / "sub" / "opt.raw", "optimizer");
  }
  std::string Verify(bool hashes = true) {
    std::ifstream in(ManifestPathFor(ckpt_, true));
    std::string text((std::istreambuf_iterator<char>(in)), {});
    auto m = ParseManifest(text, "m");
    if (!m) return m.error().message;
    auto st = VerifyManifest(*m, ckpt_, true, {hashes}, &pool_);
    return st ? "" : st.error().message;
  }
  TempDir tmp_;
  fs::path ckpt_;
  HashPool pool_{2};
};

TEST_F(ManifestFiles, SealThenVerifyDetectsChangedMissingAndExtraFiles) {
  auto sealed = SealCheckpoint(ckpt_, &pool_);
  ASSERT_TRUE(sealed) << sealed.error().message;
  EXPECT_EQ(*sealed, ckpt_ / "spotvisor.manifest.json");
  EXPECT_EQ(Verify(), "");
  WriteFile(ckpt_ / "extra.bin", "x");
  EXPECT_NE(Verify().find("extra file 'extra.bin' is not in the manifest"), std::string::npos);
  fs::remove(ckpt_ / "extra.bin");
  WriteFile(ckpt_ / "model.raw", std::string(99999, 'm') + "M");
  EXPECT_EQ(Verify(/*hashes=*/false), "");
  EXPECT_NE(Verify().find("file 'model.raw' has xxh3-128"), std::string::npos);
  EXPECT_NE(Verify().find("(contents changed)"), std::string::npos);
  WriteFile(ckpt_ / "model.raw", "short");
  EXPECT_NE(Verify(false).find("is 5 bytes, the manifest says 100000 (truncated)"), std::string::npos);
  WriteFile(ckpt_ / "model.raw", std::string(100000, 'm'));
  fs::remove(ckpt_ / "sub" / "opt.raw");
  EXPECT_NE(Verify(false).find("'sub/opt.raw' listed in the manifest is missing"), std::string::npos);
}

// Issue 12.3: sealing used to certify corruption; a manifest now never covers a bad file.
TEST_F(ManifestFiles, SealRefusesACheckpointThatIsAlreadyCorrupt) {
  std::string zip = testfiles::Zip(testfiles::TorchEntries("step_1"));
  const fs::path good = tmp_ / "step_1.pt";
  WriteFile(good, zip);
  ASSERT_TRUE(SealCheckpoint(good, &pool_));
  zip[zip.find("tensor-bytes")] ^= 0x01;
  const fs::path bad = tmp_ / "step_2.pt";
  WriteFile(bad, zip);
  auto sealed = SealCheckpoint(bad, &pool_);
  ASSERT_FALSE(sealed);
  EXPECT_NE(sealed.error().message.find("refusing to seal " + bad.string() + ": it is not a good checkpoint"),
            std::string::npos)
      << sealed.error().message;
  EXPECT_NE(sealed.error().message.find("CRC-32 mismatch"), std::string::npos) << sealed.error().message;
  EXPECT_FALSE(fs::exists(ManifestPathFor(bad, false)));
  // A directory with the bad file in it is refused the same way.
  fs::create_directories(tmp_ / "checkpoint-2");
  WriteFile(tmp_ / "checkpoint-2" / "model.pt", zip);
  EXPECT_FALSE(SealCheckpoint(tmp_ / "checkpoint-2", &pool_));
  EXPECT_FALSE(fs::exists(tmp_ / "checkpoint-2" / "spotvisor.manifest.json"));
  // Re-sealing: a file the old manifest does not list yet is fine; one it lists must match.
  ASSERT_TRUE(SealCheckpoint(ckpt_, &pool_));
  WriteFile(ckpt_ / "extra.raw", "added later");
  ASSERT_TRUE(SealCheckpoint(ckpt_, &pool_));
  WriteFile(ckpt_ / "model.raw", std::string(99999, 'm') + "M");  // a flipped byte no format can see
  auto resealed = SealCheckpoint(ckpt_, &pool_);
  ASSERT_FALSE(resealed);
  EXPECT_NE(resealed.error().message.find("(contents changed)"), std::string::npos) << resealed.error().message;
}

TEST_F(ManifestFiles, SingleFileSidecarAndCrc32Manifests) {
  const fs::path file = ckpt_ / "model.raw";
  auto sealed = SealCheckpoint(file, nullptr);
  ASSERT_TRUE(sealed);
  EXPECT_EQ(sealed->filename(), "model.raw.spotvisor.manifest.json");
  // What the stdlib Python helper writes: zlib.crc32 as 8 hex digits.
  const std::string content(100000, 'm');
  char crc[9];
  std::snprintf(crc, sizeof crc, "%08x", Crc32(0, content.data(), content.size()));
  auto m =
      ParseManifest(Doc(R"({"path":"model.raw","size":100000,"hash":")" + std::string(crc) + R"("})", "crc32"), "m");
  ASSERT_TRUE(m) << m.error().message;
  EXPECT_TRUE(VerifyManifest(*m, file, false, {true}, nullptr));
  m->files[0].hash = "00000000";
  auto st = VerifyManifest(*m, file, false, {true}, nullptr);
  ASSERT_FALSE(st);
  EXPECT_NE(st.error().message.find("has crc32 " + std::string(crc)), std::string::npos);
}

TEST(CheckpointManifest, HashMatchesXxhsumCanonicalForm) {
  TempDir tmp;
  WriteFile(tmp / "f", "spotvisor");
  auto h = HashFile(tmp / "f", "xxh3-128");
  ASSERT_TRUE(h);
  EXPECT_EQ(h->size(), 32u);
  if (std::system("command -v xxhsum >/dev/null 2>&1") != 0) GTEST_SKIP() << "xxhsum not installed";
  const std::string cmd = "xxhsum -H2 " + (tmp / "f").string() + " > " + (tmp / "out").string();
  ASSERT_EQ(std::system(cmd.c_str()), 0);
  EXPECT_EQ(spotvisor::testing::ReadFile(tmp / "out").substr(0, 32), *h);
}

}  // namespace
}  // namespace spotvisor::checkpoint

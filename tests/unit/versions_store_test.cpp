// The versions spotvisor keeps of a fixed-name checkpoint (checkpoints.pattern without
// {step}): generations, the keep bound, content matched by size and mtime, a stale
// judgement or a stop giving way, and the catalog's selection putting the newest good
// version back over a torn or missing file in place (the torn one quarantined).
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <filesystem>
#include <string>

#include "checkpoint_test_files.hpp"
#include "spotvisor/checkpoint/catalog.hpp"
#include "spotvisor/versions/version_store.hpp"
#include "support/log_capture.hpp"
#include "support/test_support.hpp"

namespace spotvisor::checkpoint {
namespace {

namespace fs = std::filesystem;
using spotvisor::testing::ReadFile;
using spotvisor::testing::TempDir;
using spotvisor::testing::WriteFile;
using versions::kDefaultFixedKeep;
using versions::KeepOutcome;
using versions::VersionStore;

// A valid safetensors file whose 8 data bytes say `tag`.
std::string Weights(const std::string& tag) {
  std::string data = tag;
  data.resize(8, '.');
  return testfiles::Safetensors(R"({"w":{"dtype":"U8","shape":[8],"data_offsets":[0,8]}})", data);
}

// Saves over the file in place as torch.save does (same inode: truncate, write), with an
// mtime of its own so that each save is another content.
void SaveInPlace(const fs::path& path, const std::string& bytes, int second) {
  WriteFile(path, bytes);
  const struct timespec times[2] = {{second, 0}, {second, 0}};
  ASSERT_EQ(::utimensat(AT_FDCWD, path.c_str(), times, 0), 0);
}

versions::ContentKey KeyNow(const fs::path& path) {
  bool is_directory = false;
  auto key = CheckpointKey(path, is_directory);
  EXPECT_TRUE(key) << (key ? "" : key.error().message);
  return key ? versions::ContentKey{key->size, key->mtime_ns, key->inode} : versions::ContentKey{};
}

std::optional<versions::ContentKey> Measure(const fs::path& path, bool& is_directory) {
  auto key = CheckpointKey(path, is_directory);
  if (!key) return std::nullopt;
  return versions::ContentKey{key->size, key->mtime_ns, key->inode};
}

KeepOutcome KeepNow(VersionStore& store) {
  auto kept = store.Keep(KeyNow(store.in_place()), nullptr);
  EXPECT_TRUE(kept) << (kept ? "" : kept.error().message);
  return kept ? *kept : KeepOutcome{};
}

TEST(VersionStore, KeepsGenerationsUpToTheBoundOldestGoFirst) {
  TempDir dir;
  VersionStore store(dir.path(), "model.safetensors", 2, Measure);
  const fs::path in_place = dir / "model.safetensors";
  for (int save = 1; save <= 3; ++save) {
    SaveInPlace(in_place, Weights("save" + std::to_string(save)), 1000 + save);
    EXPECT_EQ(store.GenerationOf(KeyNow(in_place)), static_cast<std::uint64_t>(save));  // not kept yet: the next
    const KeepOutcome out = KeepNow(store);
    ASSERT_EQ(out.kind, KeepOutcome::Kind::kKept);
    EXPECT_EQ(out.version.generation, static_cast<std::uint64_t>(save));
    EXPECT_EQ(out.version.path, dir / ".spotvisor-versions" / ("v" + std::to_string(save)) / "model.safetensors");
    EXPECT_EQ(ReadFile(out.version.path), Weights("save" + std::to_string(save)));
    EXPECT_EQ(out.stats.bytes, Weights("x").size());
    EXPECT_EQ(store.GenerationOf(KeyNow(in_place)), static_cast<std::uint64_t>(save));  // kept: its own
    if (save == 3) {
      ASSERT_EQ(out.deleted.size(), 1u);
      EXPECT_EQ(out.deleted[0], dir / ".spotvisor-versions" / "v1" / "model.safetensors");
    }
  }
  const auto versions = store.List();
  ASSERT_EQ(versions.size(), 2u);
  EXPECT_EQ(versions[0].generation, 3u);  // newest first
  EXPECT_EQ(versions[1].generation, 2u);
  EXPECT_FALSE(fs::exists(dir / ".spotvisor-versions" / "v1"));
}

TEST(VersionStore, TheSameContentIsKeptOnceAndKeepZeroMeansTheDefaultBound) {
  TempDir dir;
  VersionStore store(dir.path(), "model.safetensors", 0, Measure);
  EXPECT_EQ(store.keep(), kDefaultFixedKeep);
  SaveInPlace(dir / "model.safetensors", Weights("a"), 1000);
  ASSERT_EQ(KeepNow(store).kind, KeepOutcome::Kind::kKept);
  const KeepOutcome again = KeepNow(store);
  EXPECT_EQ(again.kind, KeepOutcome::Kind::kAlreadyKept);
  EXPECT_EQ(again.version.generation, 1u);
  EXPECT_EQ(store.List().size(), 1u);
}

// The judgement was for other content (a new save began since): no version of a mix.
TEST(VersionStore, ContentThatChangedSinceItWasJudgedIsNotKept) {
  TempDir dir;
  VersionStore store(dir.path(), "model.safetensors", 2, Measure);
  SaveInPlace(dir / "model.safetensors", Weights("old"), 1000);
  const versions::ContentKey judged = KeyNow(dir / "model.safetensors");
  SaveInPlace(dir / "model.safetensors", Weights("new"), 1001);
  auto kept = store.Keep(judged, nullptr);
  ASSERT_TRUE(kept) << kept.error().message;
  EXPECT_EQ(kept->kind, KeepOutcome::Kind::kChanged);
  EXPECT_TRUE(store.List().empty());
  EXPECT_TRUE(fs::is_empty(dir / ".spotvisor-versions"));  // no temp left behind
}

// While the trainer is being stopped a byte copy gives way; a reflink (no bytes moved)
// does not need to. Which one this filesystem does decides what the test expects.
TEST(VersionStore, AByteCopyGivesWayWhenAskedAReflinkNeedNot) {
  TempDir dir;
  VersionStore store(dir.path(), "model.safetensors", 2, Measure);
  SaveInPlace(dir / "model.safetensors", Weights("a"), 1000);
  auto kept = store.Keep(KeyNow(dir / "model.safetensors"), [] { return true; });
  ASSERT_TRUE(kept) << kept.error().message;
  if (kept->kind == KeepOutcome::Kind::kKept) {
    EXPECT_TRUE(kept->stats.reflinked());
  } else {
    EXPECT_EQ(kept->kind, KeepOutcome::Kind::kAbandoned);
    EXPECT_TRUE(store.List().empty());
    EXPECT_TRUE(fs::is_empty(dir / ".spotvisor-versions"));
  }
}

TEST(VersionStore, ADirectoryCheckpointIsKeptWholeWithItsMtimes) {
  TempDir dir;
  VersionStore store(dir.path(), "out", 2, Measure);
  fs::create_directories(dir / "out" / "sub");
  WriteFile(dir / "out" / "model.safetensors", Weights("a"));
  WriteFile(dir / "out" / "sub" / "opt.json", "{}");
  const KeepOutcome out = KeepNow(store);
  ASSERT_EQ(out.kind, KeepOutcome::Kind::kKept);
  EXPECT_EQ(out.stats.files, 2u);
  EXPECT_EQ(ReadFile(out.version.path / "sub" / "opt.json"), "{}");
  EXPECT_EQ(store.GenerationOf(KeyNow(dir / "out")), 1u);  // same size and newest mtime
}

CatalogOptions FixedOptions(const TempDir& dir, int keep = 2) {
  CatalogOptions o;
  o.dir = dir.path();
  o.pattern = "model.safetensors";
  o.keep = keep;
  return o;
}

TEST(FixedNameCatalog, TheFileInPlaceIsTheCheckpointWithItsGenerationAsStep) {
  TempDir dir;
  auto catalog = Catalog::Create(FixedOptions(dir));
  ASSERT_TRUE(catalog) << catalog.error().message;
  ASSERT_NE(catalog->versions(), nullptr);
  SaveInPlace(dir / "model.safetensors", Weights("a"), 1000);
  ASSERT_EQ(KeepNow(*catalog->versions()).kind, KeepOutcome::Kind::kKept);
  SaveInPlace(dir / "model.safetensors", Weights("b"), 1001);
  auto selection = catalog->Select(/*act=*/true);
  ASSERT_TRUE(selection) << selection.error().message;
  ASSERT_TRUE(selection->chosen);
  EXPECT_EQ(selection->chosen->path, dir / "model.safetensors");
  EXPECT_EQ(selection->chosen->step, 2u);  // newer than the one kept version
  EXPECT_EQ(ReadFile(dir / "model.safetensors"), Weights("b"));
}

TEST(FixedNameCatalog, ATornFileInPlaceIsQuarantinedAndTheNewestKeptVersionPutBack) {
  TempDir dir;
  spotvisor::testing::LogCapture log;
  auto catalog = Catalog::Create(FixedOptions(dir));
  ASSERT_TRUE(catalog) << catalog.error().message;
  for (int save = 1; save <= 2; ++save) {
    SaveInPlace(dir / "model.safetensors", Weights("save" + std::to_string(save)), 1000 + save);
    ASSERT_EQ(KeepNow(*catalog->versions()).kind, KeepOutcome::Kind::kKept);
  }
  const std::string torn = Weights("save3").substr(0, 30);  // killed while saving over it
  WriteFile(dir / "model.safetensors", torn);

  auto view = catalog->Select(/*act=*/false);  // a listing changes nothing
  ASSERT_TRUE(view);
  EXPECT_FALSE(view->chosen);
  EXPECT_EQ(ReadFile(dir / "model.safetensors"), torn);

  auto selection = catalog->Select(/*act=*/true);
  ASSERT_TRUE(selection) << selection.error().message;
  ASSERT_TRUE(selection->chosen) << log.Joined();
  EXPECT_EQ(selection->chosen->path, dir / "model.safetensors");  // what the trainer reads
  EXPECT_EQ(selection->chosen->step, 2u);
  EXPECT_EQ(ReadFile(dir / "model.safetensors"), Weights("save2"));
  ASSERT_EQ(selection->rejected.size(), 1u);
  ASSERT_TRUE(selection->rejected[0].moved_to);
  EXPECT_EQ(ReadFile(*selection->rejected[0].moved_to), torn);
  EXPECT_EQ(log.Count("event=checkpoint_version_restored"), 1) << log.Joined();
  EXPECT_EQ(catalog->versions()->List().size(), 2u);  // the version stays kept
  for (const auto& entry : fs::directory_iterator(dir.path())) {
    EXPECT_EQ(entry.path().filename().string().find(".spotvisor-restore-tmp"), std::string::npos);
  }
}

TEST(FixedNameCatalog, AMissingFileIsPutBackFromTheNewestVersionThatValidates) {
  TempDir dir;
  spotvisor::testing::LogCapture log;
  auto catalog = Catalog::Create(FixedOptions(dir));
  ASSERT_TRUE(catalog) << catalog.error().message;
  for (int save = 1; save <= 2; ++save) {
    SaveInPlace(dir / "model.safetensors", Weights("save" + std::to_string(save)), 1000 + save);
    ASSERT_EQ(KeepNow(*catalog->versions()).kind, KeepOutcome::Kind::kKept);
  }
  fs::remove(dir / "model.safetensors");
  WriteFile(dir / ".spotvisor-versions" / "v2" / "model.safetensors", "rotten");  // the newest is bad
  auto selection = catalog->Select(/*act=*/true);
  ASSERT_TRUE(selection) << selection.error().message;
  ASSERT_TRUE(selection->chosen) << log.Joined();
  EXPECT_EQ(selection->chosen->step, 1u);
  EXPECT_EQ(ReadFile(dir / "model.safetensors"), Weights("save1"));
  EXPECT_EQ(log.Count("event=checkpoint_version_rejected"), 1) << log.Joined();
  EXPECT_NE(log.Joined().find("replaced=\"nothing: the file was missing\""), std::string::npos) << log.Joined();
}

TEST(FixedNameCatalog, NoGoodVersionMeansAFreshStart) {
  TempDir dir;
  auto catalog = Catalog::Create(FixedOptions(dir));
  ASSERT_TRUE(catalog) << catalog.error().message;
  WriteFile(dir / "model.safetensors", Weights("a").substr(0, 20));
  auto selection = catalog->Select(/*act=*/true);
  ASSERT_TRUE(selection) << selection.error().message;
  EXPECT_FALSE(selection->chosen);
  EXPECT_FALSE(fs::exists(dir / "model.safetensors"));  // quarantined as any bad checkpoint
}

}  // namespace
}  // namespace spotvisor::checkpoint

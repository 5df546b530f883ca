// A fixed-name checkpoint end to end with the real binary and a real trainer process (the
// child helper's in-place mode): it saves model.safetensors over the same file, spotvisor
// keeps a version of each good save, the trainer dies half-way through a save (a torn
// file), and the next start resumes from the version put back in place; the torn file is
// quarantined. No fixed sleeps: every wait is for a log line or a file.
#include <gtest/gtest.h>

#include <chrono>
#include <filesystem>
#include <regex>
#include <string>

#include "support/test_support.hpp"

namespace spotvisor {
namespace {

using namespace std::chrono_literals;
using testing::ReadFile;
using testing::ReadLines;
using testing::Spawn;
using testing::TempDir;
using testing::WaitExit;
using testing::WaitUntil;
using testing::WriteFile;

std::string InPlaceJob(const TempDir& dir, int saves) {
  const std::string helper = SPOTVISOR_CHILD_HELPER;
  return "job:\n  name: in-place\n  command: [\"" + helper +
         "\", \"--mode=in-place\", \"--record=" + (dir / "record.txt").string() +
         "\", \"--ckpt-dir=" + (dir / "ckpt").string() + "\", \"--saves=" + std::to_string(saves) +
         "\", \"--go=" + (dir / "go").string() +
         "\"]\n  resume_args: [\"--resume_from={checkpoint}\"]\n"
         "checkpoints:\n  dir: ./ckpt\n  pattern: \"model.safetensors\"\n"
         "signals:\n  grace: 2s\n  kill_timeout: 5s\n"
         "restart:\n  backoff: {initial: 1ms, max: 10ms, multiplier: 2, jitter: 0}\n"
         "telemetry:\n  state_dir: ./state\n";
}

// Whether one of the kept versions holds the save tagged `tag` (v<N>: a version still being
// made is in .tmp-v<N>, and is not kept until it is renamed).
bool VersionKept(const TempDir& dir, const std::string& tag) {
  std::error_code ec;
  for (std::filesystem::directory_iterator it(dir / "ckpt" / ".spotvisor-versions", ec), end; !ec && it != end;
       it.increment(ec)) {
    if (!it->path().filename().string().starts_with("v")) continue;
    if (ReadFile(it->path() / "model.safetensors").find(tag) != std::string::npos) return true;
  }
  return false;
}

bool HasRow(const std::string& listing, const std::filesystem::path& path, const std::string& step) {
  return std::regex_search(listing, std::regex(path.string() + " +" + step + " "));
}

TEST(FixedNameCheckpoint, ATornSaveInPlaceResumesFromTheKeptVersion) {
  TempDir dir;
  std::filesystem::create_directories(dir / "ckpt");
  WriteFile(dir / "job.yaml", InPlaceJob(dir, 2));
  const auto run = Spawn({SPOTVISOR_BINARY, "run", "--config", (dir / "job.yaml").string()}, dir / "out.txt");
  // The second save's version is kept before the trainer starts its third, torn one.
  ASSERT_TRUE(WaitUntil([&] { return VersionKept(dir, "save2"); }, 20s)) << ReadFile(dir / "out.txt");
  WriteFile(dir / "go", "");
  ASSERT_EQ(WaitExit(run.pid, 30s), 0) << ReadFile(dir / "out.txt");
  const std::string out = ReadFile(dir / "out.txt");

  const auto lines = ReadLines(dir / "record.txt");
  ASSERT_FALSE(lines.empty()) << out;
  EXPECT_EQ(lines.back(), "resumed=save2...") << out;
  EXPECT_NE(out.find("event=checkpoint_rejected path=" + (dir / "ckpt" / "model.safetensors").string()),
            std::string::npos)
      << out;
  EXPECT_NE(out.find("event=checkpoint_version_restored"), std::string::npos) << out;
  EXPECT_NE(out.find("--resume_from=" + (dir / "ckpt" / "model.safetensors").string()), std::string::npos) << out;
  // The torn file is in the quarantine; the kept version is still there.
  const std::string torn = ReadFile(dir / "ckpt" / ".spotvisor-quarantine" / "model.safetensors");
  EXPECT_FALSE(torn.empty());
  EXPECT_EQ(torn.find("save3"), std::string::npos);  // only its first half was written
  EXPECT_NE(ReadFile(dir / "ckpt" / "model.safetensors").find("save2"), std::string::npos);
}

// The listing shows the file in place and the kept versions, each with its generation.
TEST(FixedNameCheckpoint, CheckpointsListsTheFileInPlaceAndItsVersions) {
  TempDir dir;
  std::filesystem::create_directories(dir / "ckpt");
  WriteFile(dir / "job.yaml", InPlaceJob(dir, 1));
  const auto run = Spawn({SPOTVISOR_BINARY, "run", "--config", (dir / "job.yaml").string()}, dir / "out.txt");
  ASSERT_TRUE(WaitUntil([&] { return VersionKept(dir, "save1"); }, 20s)) << ReadFile(dir / "out.txt");
  WriteFile(dir / "go", "");
  ASSERT_EQ(WaitExit(run.pid, 30s), 0) << ReadFile(dir / "out.txt");
  std::string listing;
  EXPECT_EQ(testing::RunSpotvisor({"checkpoints", "--config", (dir / "job.yaml").string()}, &listing), 0) << listing;
  EXPECT_TRUE(HasRow(listing, dir / "ckpt" / "model.safetensors", "1")) << listing;
  EXPECT_TRUE(HasRow(listing, dir / "ckpt" / ".spotvisor-versions" / "v1" / "model.safetensors", "1")) << listing;
  std::string latest;
  EXPECT_EQ(testing::RunSpotvisor({"latest", "--config", (dir / "job.yaml").string()}, &latest), 0) << latest;
  EXPECT_NE(latest.find((dir / "ckpt" / "model.safetensors").string() + "\n"), std::string::npos) << latest;
}

}  // namespace
}  // namespace spotvisor

// Fencing end to end: a checkpoint written by an epoch the group had left (the state dir's
// attempts.jsonl says a later epoch started below its step) is never selected, offered to
// the group, quarantined or deleted; `spotvisor latest` (the real binary) never names it
// and `spotvisor checkpoints` says why. Safetensors directories: no torch needed.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "spotvisor/checkpoint/catalog.hpp"
#include "spotvisor/checkpoint/manifest.hpp"
#include "support/test_support.hpp"

namespace spotvisor::checkpoint {
namespace {

namespace fs = std::filesystem;
using spotvisor::testing::RunSpotvisor;
using spotvisor::testing::TempDir;
using spotvisor::testing::WriteFile;

class CheckpointFence : public ::testing::Test {
 protected:
  CheckpointFence() { fs::create_directories(state_); }

  // A good checkpoint at `step` whose manifest says `epoch` (as the Python helper writes
  // it under spotvisor); none: a manifest without one (as `spotvisor seal` writes it).
  void Write(std::uint64_t step, std::optional<std::uint64_t> epoch) {
    const fs::path ckpt = dir_ / ("ckpt_step" + std::to_string(step));
    testing::WriteValidCheckpoint(ckpt);
    auto sealed = SealCheckpoint(ckpt, nullptr);
    ASSERT_TRUE(sealed) << sealed.error().message;
    auto manifest = ReadManifestFile(*sealed);
    ASSERT_TRUE(manifest) << manifest.error().message;
    manifest->epoch = epoch;
    WriteFile(*sealed, SerializeManifest(*manifest));
  }
  // attempts.jsonl: one record per (epoch, resume step; none: a fresh start).
  void Attempts(const std::vector<std::pair<std::uint64_t, std::optional<std::uint64_t>>>& starts) {
    std::string lines;
    int attempt = 0;
    for (const auto& [epoch, step] : starts) {
      nlohmann::json j = {{"attempt", ++attempt},   {"started_ms", 1},  {"ended_ms", 2}, {"pid", 100},
                          {"outcome", "preempted"}, {"next", "resume"}, {"epoch", epoch}};
      j["resume_step"] = step ? nlohmann::json(*step) : nlohmann::json(nullptr);
      lines += j.dump() + "\n";
    }
    WriteFile(state_ / "attempts.jsonl", lines);
  }
  Result<Catalog> Make(int keep = 0) {
    CatalogOptions o;
    o.dir = dir_;
    o.pattern = "ckpt_step{step}";
    o.cache_file = state_ / "checkpoint-cache.tsv";
    o.keep = keep;
    o.judge_older = true;
    o.fence = ReadFence(state_);
    return Catalog::Create(o);
  }
  // The job's own 900, 1000 and 1100 and four fenced ones (epoch 3 after epoch 4 started
  // from 1000), selected with keep 2: the choice is 1100, the good ones 1100 and 1000.
  void PruneFourFencedWithKeepTwo() {
    Write(900, 3);
    Write(1000, 3);
    Write(1100, std::nullopt);  // no epoch: the job's own
    for (std::uint64_t step : {1200, 1300, 1400, 1500}) Write(step, 3);
    Attempts({{3, 800}, {4, 1000}});
    auto catalog = Make(/*keep=*/2);
    ASSERT_TRUE(catalog) << catalog.error().message;
    auto sel = catalog->Select(/*act=*/true);
    ASSERT_TRUE(sel && sel->chosen) << (sel ? "" : sel.error().message);
    EXPECT_EQ(sel->chosen->step, 1100u);
    EXPECT_EQ(Steps(sel->good), (std::vector<std::uint64_t>{1100, 1000}));
  }
  static std::vector<std::uint64_t> Steps(const std::vector<ResumePoint>& points) {
    std::vector<std::uint64_t> out;
    for (const auto& p : points) out.push_back(p.step);
    return out;
  }

  TempDir tmp_;
  fs::path dir_ = tmp_ / "ckpt";
  fs::path state_ = tmp_ / "state";
};

// Epoch 3 saved 1200 after epoch 4 had started from 1000: passed over, left in place, not
// among the group's good steps, and neither kept nor deleted by retention.
TEST_F(CheckpointFence, TheSelectionPassesOverAFencedCheckpointAndLeavesItAlone) {
  Write(900, 3);
  Write(1000, 3);
  Write(1100, std::nullopt);  // no epoch: never fenced
  Write(1200, 3);
  Attempts({{3, 800}, {4, 1000}});
  auto catalog = Make(/*keep=*/1);
  ASSERT_TRUE(catalog) << catalog.error().message;
  auto sel = catalog->Select(/*act=*/true);
  ASSERT_TRUE(sel) << sel.error().message;
  ASSERT_TRUE(sel->chosen);
  EXPECT_EQ(sel->chosen->step, 1100u);
  ASSERT_EQ(sel->rejected.size(), 1u);
  EXPECT_TRUE(sel->rejected[0].fenced);
  EXPECT_FALSE(sel->rejected[0].moved_to);
  EXPECT_EQ(sel->rejected[0].reason,
            "written by epoch 3 at step 1200 after epoch 4 had started from step 1000 "
            "(a writer the group had left behind: fenced)");
  EXPECT_TRUE(fs::exists(dir_ / "ckpt_step1200")) << "fenced is not corrupt: never quarantined";
  EXPECT_FALSE(fs::exists(dir_ / ".spotvisor-quarantine"));
  // keep: 1 deleted 1000 and 900, never the fenced one.
  EXPECT_FALSE(fs::exists(dir_ / "ckpt_step1000"));
  EXPECT_FALSE(fs::exists(dir_ / "ckpt_step900"));
  EXPECT_EQ(Steps(sel->good), (std::vector<std::uint64_t>{1100}));
}

// Issue 37: a flapping node's fenced checkpoints do not fill the dir. They count apart
// from the job's own: with keep 2, the two newest fenced ones stay, older fenced ones go,
// and the job's own two newest good ones are never pushed out by them.
TEST_F(CheckpointFence, FencedCheckpointsArePrunedApartFromTheJobsOwn) {
  PruneFourFencedWithKeepTwo();
  for (const char* kept : {"ckpt_step1100", "ckpt_step1000", "ckpt_step1500", "ckpt_step1400"})
    EXPECT_TRUE(fs::exists(dir_ / kept)) << kept;
  for (const char* gone : {"ckpt_step900", "ckpt_step1200", "ckpt_step1300"})
    EXPECT_FALSE(fs::exists(dir_ / gone)) << gone;
}

// ... and `spotvisor checkpoints` (the real binary) still says why each that is left is
// fenced.
TEST_F(CheckpointFence, PrunedFencedOnesLeaveTheCommandsSayingWhyForTheRest) {
  PruneFourFencedWithKeepTwo();
  const fs::path job = tmp_ / "job.yaml";
  WriteFile(job,
            "job:\n  command: [\"/bin/true\"]\ncheckpoints:\n  dir: ./ckpt\n"
            "  pattern: \"ckpt_step{step}\"\ntelemetry:\n  state_dir: ./state\n");
  std::string out;
  RunSpotvisor({"checkpoints", "--config", job.string(), "--json"}, &out);
  ASSERT_NE(out.find('['), std::string::npos) << out;
  const auto list = nlohmann::json::parse(out.substr(out.find('[')));
  std::vector<std::uint64_t> fenced;
  for (const auto& row : list) {
    if (!row.at("fenced").is_null()) fenced.push_back(row.at("step").get<std::uint64_t>());
  }
  EXPECT_EQ(fenced, (std::vector<std::uint64_t>{1500, 1400})) << out;
}

TEST_F(CheckpointFence, TheGroupIsOfferedNoFencedStep) {
  Write(10, 1);
  Write(20, 1);
  Write(30, 2);
  Attempts({{1, std::nullopt}, {2, 10}});
  auto catalog = Make();
  ASSERT_TRUE(catalog) << catalog.error().message;
  auto sel = catalog->Select(/*act=*/true);
  ASSERT_TRUE(sel && sel->chosen);
  EXPECT_EQ(Steps(sel->good), (std::vector<std::uint64_t>{30, 10}));
  fs::remove_all(dir_ / "ckpt_step30");
  sel = catalog->Select(/*act=*/false);
  ASSERT_TRUE(sel && sel->chosen);
  EXPECT_EQ(sel->chosen->step, 10u);
  EXPECT_EQ(Steps(sel->good), (std::vector<std::uint64_t>{10}));
  // Without the record of epoch 2 nothing is fenced.
  fs::remove(state_ / "attempts.jsonl");
  auto unfenced = Make();
  ASSERT_TRUE(unfenced);
  EXPECT_EQ(unfenced->Select(/*act=*/false)->chosen->step, 20u);
}

// The real binary, reading the state dir from the job file: epoch 2 resumed from step 10;
// 10 and 20 are epoch 1's, 30 is epoch 2's.
TEST_F(CheckpointFence, LatestNeverNamesItAndCheckpointsSaysWhy) {
  Write(10, 1);
  Write(20, 1);
  Write(30, 2);
  Attempts({{1, std::nullopt}, {2, 10}});
  const fs::path job = tmp_ / "job.yaml";
  WriteFile(job,
            "job:\n  command: [\"/bin/true\"]\ncheckpoints:\n  dir: ./ckpt\n"
            "  pattern: \"ckpt_step{step}\"\ntelemetry:\n  state_dir: ./state\n");
  const std::string why =
      "written by epoch 1 at step 20 after epoch 2 had started from step 10 (a writer the group had left behind: "
      "fenced)";
  std::string out;
  EXPECT_EQ(RunSpotvisor({"latest", "--config", job.string()}, &out), 0) << out;
  EXPECT_NE(out.find((dir_ / "ckpt_step30").string() + "\n"), std::string::npos) << out;
  fs::remove_all(dir_ / "ckpt_step30");
  EXPECT_EQ(RunSpotvisor({"latest", "--config", job.string()}, &out), 0) << out;
  EXPECT_NE(out.find((dir_ / "ckpt_step10").string() + "\n"), std::string::npos) << out;
  EXPECT_EQ(out.find((dir_ / "ckpt_step20").string() + "\n"), std::string::npos) << out;
  EXPECT_NE(out.find("skipped " + (dir_ / "ckpt_step20").string() + ": " + why), std::string::npos) << out;

  EXPECT_EQ(RunSpotvisor({"checkpoints", "--config", job.string()}, &out), 1) << out;
  bool row_found = false;
  for (std::size_t at = 0, end; at < out.size(); at = end + 1) {
    end = out.find('\n', at);
    if (end == std::string::npos) end = out.size();
    const std::string row = out.substr(at, end - at);
    if (row.find("ckpt_step20") == std::string::npos) continue;
    row_found = true;
    EXPECT_NE(row.find("FENCED"), std::string::npos) << row;
    EXPECT_NE(row.find(why), std::string::npos) << row;
  }
  EXPECT_TRUE(row_found) << out;

  EXPECT_EQ(RunSpotvisor({"checkpoints", "--config", job.string(), "--json"}, &out), 1) << out;
  const auto list = nlohmann::json::parse(out.substr(out.find('[')));
  ASSERT_EQ(list.size(), 2u) << out;
  EXPECT_EQ(list[0].at("step"), 20);
  EXPECT_EQ(list[0].at("good"), true) << "its bytes are fine";
  EXPECT_EQ(list[0].at("fenced"), why);
  EXPECT_EQ(list[1].at("step"), 10);
  EXPECT_TRUE(list[1].at("fenced").is_null());
  EXPECT_TRUE(fs::exists(dir_ / "ckpt_step20")) << "the commands change nothing";
}

}  // namespace
}  // namespace spotvisor::checkpoint

// Fencing (fence.hpp): the manifest's `epoch` (parsed, refused when it is not a non-negative
// integer, absent in old manifests, kept by a re-seal), and the rule over the state dir's
// attempt records: several epochs, a fresh start (step 0), a checkpoint without an epoch,
// a step equal to a later epoch's start.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "spotvisor/checkpoint/fence.hpp"
#include "spotvisor/checkpoint/manifest.hpp"
#include "spotvisor/state/journal.hpp"
#include "support/test_support.hpp"

namespace spotvisor::checkpoint {
namespace {

namespace fs = std::filesystem;
using spotvisor::testing::TempDir;
using spotvisor::testing::WriteFile;

std::string Doc(const std::string& epoch_field) {
  return R"({"format":"spotvisor-manifest","version":1,"algorithm":"crc32",)" + epoch_field +
         R"("files":[{"path":"a.bin","size":1,"hash":"0000000a"}]})";
}

TEST(ManifestEpoch, ParsedWhenPresentAndAbsentInOldManifests) {
  auto with = ParseManifest(Doc(R"("epoch":3,)"), "m.json");
  ASSERT_TRUE(with) << with.error().message;
  EXPECT_EQ(with->epoch, 3u);
  auto big = ParseManifest(Doc(R"("epoch":18446744073709551615,)"), "m.json");
  ASSERT_TRUE(big) << big.error().message;
  EXPECT_EQ(big->epoch, 18446744073709551615ull);
  auto old = ParseManifest(Doc(""), "m.json");
  ASSERT_TRUE(old) << old.error().message;
  EXPECT_FALSE(old->epoch);
  // Written back only when known: an old manifest stays what it was.
  EXPECT_EQ(SerializeManifest(*old).find("epoch"), std::string::npos);
  auto again = ParseManifest(SerializeManifest(*with), "again");
  ASSERT_TRUE(again) << again.error().message;
  EXPECT_EQ(again->epoch, 3u);
}

TEST(ManifestEpoch, ABadTypeIsAnErrorNamingTheManifestAndTheKey) {
  for (const std::string bad : {"-1", "\"3\"", "1.5", "null", "true", "[3]", "{}"}) {
    auto m = ParseManifest(Doc(R"("epoch":)" + bad + ","), "/ckpt/step_3/spotvisor.manifest.json");
    ASSERT_FALSE(m) << bad;
    EXPECT_EQ(m.error().message, "/ckpt/step_3/spotvisor.manifest.json: manifest 'epoch' is not a non-negative integer")
        << bad;
  }
}

TEST(ManifestEpoch, ReadFromACheckpointAndKeptByAReseal) {
  TempDir tmp;
  const fs::path ckpt = tmp / "step_5";
  fs::create_directories(ckpt);
  WriteFile(ckpt / "a.raw", "payload");
  EXPECT_FALSE(ManifestEpoch(ckpt, true)) << "no manifest: no epoch";
  auto sealed = SealCheckpoint(ckpt, nullptr);
  ASSERT_TRUE(sealed) << sealed.error().message;
  EXPECT_FALSE(ManifestEpoch(ckpt, true)) << "seal writes no epoch of its own";
  auto m = ReadManifestFile(*sealed);
  ASSERT_TRUE(m) << m.error().message;
  m->epoch = 4;
  WriteFile(*sealed, SerializeManifest(*m));
  EXPECT_EQ(ManifestEpoch(ckpt, true), 4u);
  WriteFile(ckpt / "b.raw", "added later");
  ASSERT_TRUE(SealCheckpoint(ckpt, nullptr));
  EXPECT_EQ(ManifestEpoch(ckpt, true), 4u) << "re-sealing does not change who wrote it";
  WriteFile(*sealed, "{not json");
  EXPECT_FALSE(ManifestEpoch(ckpt, true)) << "an unreadable manifest is validation's to report";
}

TEST(Fence, ALaterEpochThatStartedBelowTheStepFencesIt) {
  const Fence fence({{1, 0}, {2, 100}, {3, 250}, {4, 200}});
  // Epoch 2 wrote 300; epoch 3 started from 250, epoch 4 from 200: the earliest proof is named.
  EXPECT_EQ(fence.Reason(2, 300),
            "written by epoch 2 at step 300 after epoch 3 had started from step 250 "
            "(a writer the group had left behind: fenced)");
  EXPECT_EQ(fence.Reason(3, 260),
            "written by epoch 3 at step 260 after epoch 4 had started from step 200 "
            "(a writer the group had left behind: fenced)");
  EXPECT_FALSE(fence.Reason(4, 10'000)) << "no later epoch: the group's own";
  EXPECT_FALSE(fence.Reason(3, 200)) << "equal to the later start: the start itself, not past it";
  EXPECT_FALSE(fence.Reason(2, 150)) << "below every later start";
  EXPECT_FALSE(fence.Reason(std::nullopt, 10'000)) << "no epoch in the manifest: never fenced";
  EXPECT_FALSE(fence.Reason(9, 10'000)) << "an epoch newer than any recorded one";
}

TEST(Fence, AFreshStartFencesEveryEarlierStepButZero) {
  const Fence fence({{5, 0}});
  EXPECT_EQ(fence.Reason(4, 1),
            "written by epoch 4 at step 1 after epoch 5 had started from step 0 "
            "(a writer the group had left behind: fenced)");
  EXPECT_FALSE(fence.Reason(4, 0));
  EXPECT_FALSE(fence.Reason(5, 1));
  EXPECT_TRUE(Fence().empty());
  EXPECT_FALSE(Fence().Reason(1, 1));
}

TEST(Fence, FromAttemptRecordsOnlyThoseWithAnEpochLowestStartPerEpoch) {
  std::vector<state::AttemptRecord> records(4);
  records[0].attempt = 1;  // an old record: no epoch
  records[1].epoch = 2;    // fresh: no resume step
  records[2].epoch = 3;
  records[2].resume_step = 40;
  records[3].epoch = 3;
  records[3].resume_step = 30;
  const Fence fence = Fence::FromAttempts(records);
  ASSERT_EQ(fence.starts().size(), 2u);
  EXPECT_EQ(fence.starts()[0].epoch, 2u);
  EXPECT_EQ(fence.starts()[0].step, 0u);
  EXPECT_EQ(fence.starts()[1].epoch, 3u);
  EXPECT_EQ(fence.starts()[1].step, 30u);
  EXPECT_TRUE(fence.Reason(2, 35));
  EXPECT_TRUE(Fence::FromAttempts({records[0]}).empty());
}

TEST(Fence, ReadFromTheStateDirsAttemptsWhereOldRecordsStillLoad) {
  TempDir dir;
  EXPECT_TRUE(ReadFence(dir.path()).empty()) << "no attempts.jsonl";
  EXPECT_TRUE(ReadFence("").empty()) << "no state dir";
  // A record from before epochs were recorded, then one the journal writes today.
  WriteFile(dir / "attempts.jsonl",
            R"({"attempt":1,"started_ms":1,"ended_ms":2,"pid":7,"outcome":"preempted","next":"resume",)"
            R"("resume_from":null,"resume_step":null})"
            "\n");
  auto journal = state::Journal::Open(dir.path());
  ASSERT_TRUE(journal);
  state::AttemptRecord r;
  r.attempt = 2;
  r.epoch = 2;
  r.resume_step = 10;
  ASSERT_TRUE(journal->AppendAttempt(r));
  const auto attempts = journal->ReadAttempts();
  ASSERT_EQ(attempts.size(), 2u);
  EXPECT_FALSE(attempts[0].epoch);
  EXPECT_EQ(attempts[1].epoch, 2u);
  const auto line = nlohmann::json::parse(testing::ReadLines(dir / "attempts.jsonl").back());
  EXPECT_EQ(line.at("epoch"), 2);
  const Fence fence = ReadFence(dir.path());
  ASSERT_EQ(fence.starts().size(), 1u);
  EXPECT_TRUE(fence.Reason(1, 20));
  EXPECT_FALSE(fence.Reason(1, 10));
}

// The running epoch has no attempt record until it ends (nor ever, if its supervisor was
// SIGKILLed): state.json's newest start fences too.
TEST(Fence, TheNewestStartInStateJsonFencesBeforeItsAttemptIsRecorded) {
  TempDir dir;
  auto journal = state::Journal::Open(dir.path());
  ASSERT_TRUE(journal);
  state::PersistedState s;
  s.last_epoch = 4;
  s.last_epoch_step = 1000;
  ASSERT_TRUE(journal->Save(s));
  const Fence fence = ReadFence(dir.path());
  EXPECT_EQ(fence.Reason(3, 1200),
            "written by epoch 3 at step 1200 after epoch 4 had started from step 1000 "
            "(a writer the group had left behind: fenced)");
  EXPECT_FALSE(fence.Reason(4, 1200));
  WriteFile(dir / "state.json", "{corrupt");
  EXPECT_TRUE(ReadFence(dir.path()).empty()) << "no start known: nothing fenced (the supervisor reports the file)";
}

}  // namespace
}  // namespace spotvisor::checkpoint

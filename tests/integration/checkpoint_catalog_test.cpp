// The checkpoint catalog on real files: torch.save checkpoints written by Debian's
// python3-torch (model + optimizer), safetensors written by test code, HF-style and
// DCP-style directories; the corruption matrix of issue 4 (verdict and reason each);
// selection, quarantine, cache, retention, latest link, hints; and the CLI commands.
#include <gtest/gtest.h>

#include <cstdlib>
#include <fstream>

#include "../unit/checkpoint_test_files.hpp"
#include "spotvisor/checkpoint/byte_source.hpp"
#include "spotvisor/checkpoint/catalog.hpp"
#include "spotvisor/checkpoint/hash_pool.hpp"
#include "spotvisor/checkpoint/manifest.hpp"
#include "spotvisor/checkpoint/zip_archive.hpp"
#include "spotvisor/log/log.hpp"
#include "support/log_capture.hpp"
#include "support/test_support.hpp"

namespace spotvisor::checkpoint {
namespace {

namespace fs = std::filesystem;
using spotvisor::testing::ReadFile;
using spotvisor::testing::RunSpotvisor;
using spotvisor::testing::TempDir;
using spotvisor::testing::WriteFile;

// Writes fixtures with real torch: two torch.save files of a model + Adam state, a legacy
// (pre-1.6 format) file, and a DCP checkpoint torch's own writer made (one file: its
// BYTE_IO item, then one torch.save archive per tensor; .metadata).
constexpr const char* kFixtureScript = R"PY(
import os, sys
sys.path.insert(0, os.path.join(sys.argv[2], "tests", "python"))
import dcp_shim
import torch
from torch.distributed._shard.checkpoint import FileSystemWriter, save_state_dict
out = sys.argv[1]
torch.manual_seed(0)
m = torch.nn.Sequential(torch.nn.Linear(64, 128), torch.nn.ReLU(), torch.nn.Linear(128, 10))
opt = torch.optim.Adam(m.parameters())
m(torch.randn(8, 64)).sum().backward(); opt.step()
state = {"model": m.state_dict(), "optimizer": opt.state_dict(), "step": 7}
torch.save(state, os.path.join(out, "model.pt"))
torch.save(opt.state_dict(), os.path.join(out, "optimizer.pt"))
torch.save(state, os.path.join(out, "legacy.pt"), _use_new_zipfile_serialization=False)
save_state_dict({"w": torch.randn(32, 32), "ids": torch.arange(100), "step": 7},
                FileSystemWriter(os.path.join(out, "dcp"), single_file_per_rank=True), no_dist=True)
)PY";

class CheckpointCatalog : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    if (std::system("/usr/bin/python3 -c 'import torch' >/dev/null 2>&1") != 0) return;
    fixtures_ = new TempDir();
    WriteFile(*fixtures_ / "make.py", kFixtureScript);
    const std::string cmd = "/usr/bin/python3 " + (*fixtures_ / "make.py").string() + " " + fixtures_->path().string() +
                            " " + SPOTVISOR_SOURCE_DIR;
    ASSERT_EQ(std::system(cmd.c_str()), 0) << "fixture script failed";
  }
  static void TearDownTestSuite() {
    delete fixtures_;
    fixtures_ = nullptr;
  }
  void SetUp() override {
    if (fixtures_ == nullptr)
      GTEST_SKIP() << "/usr/bin/python3 has no torch (install python3-torch) - skipping real-file tests";
    dir_ = tmp_ / "ckpt";
    fs::create_directories(dir_);
  }
  static fs::path Fixture(const std::string& name) { return *fixtures_ / name; }

  Verdict Validate(const fs::path& p, const std::string& format = "auto", const std::string& marker = "") {
    ValidatorOptions o;
    o.format = format;
    o.marker = marker;
    o.root = dir_;
    o.pool = &pool_;
    return ValidateCheckpoint(p, o);
  }
  // A copy of model.pt with `edit` applied to its bytes.
  fs::path Edited(const std::string& name, const std::function<void(std::string&)>& edit) {
    std::string bytes = ReadFile(Fixture("model.pt"));
    edit(bytes);
    WriteFile(dir_ / name, bytes);
    return dir_ / name;
  }
  ZipArchive IndexOf(const fs::path& file) {
    auto src = FileSource::Open(file);
    EXPECT_TRUE(src);
    auto a = ReadZipIndex(*src, src->size(), true);
    EXPECT_TRUE(a);
    EXPECT_TRUE(CheckZipLayout(*src, *a));
    return *a;
  }
  // An HF Trainer-style checkpoint directory.
  fs::path MakeHf(const std::string& name) {
    const fs::path d = dir_ / name;
    fs::create_directories(d);
    WriteFile(
        d / "model.safetensors",
        testfiles::Safetensors(R"({"w":{"dtype":"F32","shape":[4],"data_offsets":[0,16]}})", std::string(16, '\x3f')));
    fs::copy_file(Fixture("optimizer.pt"), d / "optimizer.pt");
    fs::copy_file(Fixture("optimizer.pt"), d / "rng_state.pth");
    WriteFile(d / "config.json", R"({"model_type": "test"})");
    const std::string step = name.substr(name.rfind('-') + 1);  // checkpoint-N holds the state of step N
    WriteFile(d / "trainer_state.json", R"({"global_step": )" + step + R"(, "log_history": []})");
    return d;
  }
  fs::path MakeDcp(const std::string& name) {
    const fs::path d = dir_ / name;
    fs::create_directories(d);
    fs::copy_file(Fixture("dcp/__0_0.distcp"), d / "__0_0.distcp");
    fs::copy_file(Fixture("dcp/.metadata"), d / ".metadata");
    return d;
  }
  Result<Catalog> MakeCatalog(const std::string& pattern, bool quarantine = true, int keep = 0) {
    CatalogOptions o;
    o.dir = dir_;
    o.pattern = pattern;
    o.validator.pool = &pool_;
    o.cache_file = tmp_ / "state" / "checkpoint-cache.tsv";
    o.quarantine = quarantine;
    o.keep = keep;
    return Catalog::Create(o);
  }

  static inline TempDir* fixtures_ = nullptr;  // shared by the suite, written once
  TempDir tmp_;
  fs::path dir_;
  HashPool pool_{2};
};

#define EXPECT_BAD(verdict, text)                                                  \
  do {                                                                             \
    const Verdict v_ = (verdict);                                                  \
    EXPECT_FALSE(v_.good) << v_.reason;                                            \
    EXPECT_NE(v_.reason.find(text), std::string::npos) << "reason: " << v_.reason; \
  } while (0)

TEST_F(CheckpointCatalog, RealTorchFilesAreGood) {
  fs::copy_file(Fixture("model.pt"), dir_ / "step_1.pt");
  const Verdict v = Validate(dir_ / "step_1.pt");
  EXPECT_TRUE(v.good) << v.reason;
  EXPECT_EQ(v.format, "torch.save");
  fs::copy_file(Fixture("legacy.pt"), dir_ / "step_2.pt");
  const Verdict legacy = Validate(dir_ / "step_2.pt");
  EXPECT_TRUE(legacy.good) << legacy.reason;
  EXPECT_NE(legacy.reason.find("legacy torch pickle has no checksum"), std::string::npos) << legacy.reason;
}

TEST_F(CheckpointCatalog, TruncatedAtSeveralOffsets) {
  const auto size = fs::file_size(Fixture("model.pt"));
  for (std::uintmax_t keep : {std::uintmax_t{100}, size / 2, size - 200, size - 1}) {
    const auto p = Edited("trunc.pt", [&](std::string& b) { b.resize(keep); });
    EXPECT_BAD(Validate(p), "no end-of-central-directory record");
  }
  EXPECT_BAD(Validate(Edited("tiny.pt", [](std::string& b) { b.resize(10); })), "too short for a ZIP archive");
}

TEST_F(CheckpointCatalog, FlippedByteInTensorData) {
  const auto a = IndexOf(Fixture("model.pt"));
  const ZipEntry* tensor = nullptr;
  for (const auto& e : a.entries) {
    if (e.name.find("/data/") != std::string::npos && e.size > 100) tensor = &e;
  }
  ASSERT_NE(tensor, nullptr);
  const auto at = tensor->data_offset + tensor->size / 2;
  const auto p = Edited("flip.pt", [&](std::string& b) { b[at] ^= 0x10; });
  EXPECT_BAD(Validate(p), "entry '" + tensor->name + "': CRC-32 mismatch");
  EXPECT_BAD(Validate(p), "(offset " + std::to_string(tensor->data_offset) + ")");
  ValidatorOptions format_only;
  format_only.level = config::ValidateLevel::kFormat;
  EXPECT_TRUE(ValidateCheckpoint(p, format_only).good) << "format level does not read tensor bytes";
}

TEST_F(CheckpointCatalog, FlippedByteInLocalHeaderAndCentralDirectory) {
  const auto a = IndexOf(Fixture("model.pt"));
  const auto& second = a.entries[1];
  EXPECT_BAD(Validate(Edited("lh.pt", [&](std::string& b) { b[second.header_offset + 1] ^= 0x01; })),
             "entry '" + second.name + "': local header signature is wrong (offset " +
                 std::to_string(second.header_offset) + ")");
  EXPECT_BAD(Validate(Edited("lhname.pt", [&](std::string& b) { b[second.header_offset + 31] ^= 0x01; })),
             "local header names");
  EXPECT_BAD(Validate(Edited("cd.pt", [&](std::string& b) { b[a.cd_offset + 2] ^= 0x01; })),
             "central directory entry 0 is missing or damaged (offset " + std::to_string(a.cd_offset) + ")");
  EXPECT_BAD(Validate(Edited("cdcrc.pt", [&](std::string& b) { b[a.cd_offset + 16] ^= 0x01; })),
             "data descriptor is missing or disagrees with the central directory");
}

TEST_F(CheckpointCatalog, ZeroLengthFileAndEmptyDirectory) {
  WriteFile(dir_ / "step_1.pt", "");
  EXPECT_BAD(Validate(dir_ / "step_1.pt"), "empty file (0 bytes)");
  fs::create_directories(dir_ / "checkpoint-1");
  EXPECT_BAD(Validate(dir_ / "checkpoint-1"), "empty directory (no files)");
  const auto hf = MakeHf("checkpoint-2");
  WriteFile(hf / "optimizer.pt", "");
  EXPECT_BAD(Validate(hf), "optimizer.pt: empty file (0 bytes)");
}

TEST_F(CheckpointCatalog, CommitMarkers) {
  const auto hf = MakeHf("checkpoint-3");
  EXPECT_BAD(Validate(hf, "auto", "COMMITTED"), "missing commit marker 'COMMITTED'");
  WriteFile(hf / "COMMITTED", "");
  EXPECT_TRUE(Validate(hf, "auto", "COMMITTED").good);
  const auto dcp = MakeDcp("checkpoint-4");
  fs::rename(dcp / ".metadata", dcp / ".metadata.tmp");
  EXPECT_BAD(Validate(dcp), "missing DCP commit marker '.metadata' (only .metadata.tmp");
  const auto orbax = dir_ / "5";
  fs::create_directories(orbax / "state");
  WriteFile(orbax / "state" / "d0", "ocdbt-bytes");
  WriteFile(orbax / "_CHECKPOINT_METADATA", R"({"init_timestamp_nsecs": 1})");
  EXPECT_BAD(Validate(orbax), "missing Orbax commit marker 'commit_success.txt'");
  WriteFile(orbax / "commit_success.txt", "Checkpoint commit was successful");
  const Verdict ok = Validate(orbax);
  EXPECT_TRUE(ok.good) << ok.reason;
  EXPECT_EQ(ok.format, "orbax");
}

TEST_F(CheckpointCatalog, HuggingFaceAndDcpDirectories) {
  const auto hf = MakeHf("checkpoint-10");
  const Verdict v = Validate(hf);
  EXPECT_TRUE(v.good) << v.reason;
  EXPECT_EQ(v.format, "hf");
  WriteFile(hf / "trainer_state.json", "{\"global_step\": 1");
  EXPECT_BAD(Validate(hf), "trainer_state.json: not a JSON object");
  fs::remove(hf / "trainer_state.json");
  EXPECT_BAD(Validate(hf, "hf"), "Hugging Face Trainer checkpoint without trainer_state.json");
  const auto dcp = MakeDcp("checkpoint-11");
  const Verdict d = Validate(dcp);
  EXPECT_TRUE(d.good) << d.reason;
  EXPECT_EQ(d.format, "dcp");
  const std::string good_shard = ReadFile(Fixture("dcp/__0_0.distcp"));
  for (std::size_t at : {std::size_t{200}, std::size_t{1500}}) {  // in the BYTE_IO item's archive; in w's data
    std::string shard = good_shard;
    shard[at] ^= 0x01;
    WriteFile(dcp / "__0_0.distcp", shard);
    EXPECT_BAD(Validate(dcp), "__0_0.distcp: entry 'archive/");
    if (at == 1500) EXPECT_BAD(Validate(dcp), "CRC-32 mismatch");
  }
  WriteFile(dcp / "__0_0.distcp", good_shard.substr(0, 3000));
  EXPECT_BAD(Validate(dcp), "as .metadata records it) runs past the end of the shard at 3000 (truncated)");
}

TEST_F(CheckpointCatalog, ManifestMismatchAndTraversal) {
  const auto hf = MakeHf("checkpoint-20");
  ASSERT_TRUE(SealCheckpoint(hf, &pool_));
  EXPECT_TRUE(Validate(hf).good);
  std::string cfg = ReadFile(hf / "config.json");
  cfg[3] = 'X';
  WriteFile(hf / "config.json", cfg);
  EXPECT_BAD(Validate(hf), "file 'config.json' has xxh3-128");
  WriteFile(
      hf / "spotvisor.manifest.json",
      R"({"format":"spotvisor-manifest","version":1,"algorithm":"xxh3-128","files":[{"path":"../escape","size":1,"hash":")" +
          std::string(32, '0') + R"("}]})");
  EXPECT_BAD(Validate(hf), "path '../escape' is absolute or contains '..'");
}

TEST_F(CheckpointCatalog, SymlinksMustStayInsideAndLoopsAreReported) {
  TempDir elsewhere;
  fs::copy_file(Fixture("model.pt"), elsewhere / "x.pt");
  fs::create_symlink(elsewhere / "x.pt", dir_ / "step_40.pt");
  EXPECT_BAD(Validate(dir_ / "step_40.pt"), "symlink escapes the checkpoint directory");
  const auto hf = MakeHf("checkpoint-41");
  fs::create_symlink(elsewhere / "x.pt", hf / "pytorch_model.bin");
  EXPECT_BAD(Validate(hf), "symlink escapes the checkpoint directory");
  fs::create_symlink(dir_ / "step_43.pt", dir_ / "step_42.pt");
  fs::create_symlink(dir_ / "step_42.pt", dir_ / "step_43.pt");
  EXPECT_BAD(Validate(dir_ / "step_42.pt"), "symlink loop");
}

// Log fields stay fields whatever a path or a reason holds: a checkpoint dir named with a
// space and a quote reads back from every line the selection logs.
TEST_F(CheckpointCatalog, LogFieldsSurviveQuotesAndSpacesInPaths) {
  const fs::path odd = tmp_ / "my \"ckpts\" dir";
  fs::create_directories(odd);
  fs::copy_file(Fixture("model.pt"), odd / "step_1.pt");
  WriteFile(odd / "step_2.pt", ReadFile(Fixture("model.pt")).substr(0, 300));
  CatalogOptions o;
  o.dir = odd;
  o.pattern = "step_{step}.pt";
  o.validator.pool = &pool_;
  auto catalog = Catalog::Create(o);
  ASSERT_TRUE(catalog) << catalog.error().message;
  testing::LogCapture logs;
  ASSERT_TRUE(catalog->Select(/*act=*/true));
  int lines = 0;
  for (const auto& line : logs.Lines()) {
    const auto fields = log::ParseFields(line.substr(line.find(' ') + 1));  // "<level> <message>"
    const auto event = fields.count("event") ? fields.at("event") : "";
    if (event == "checkpoint_validated" || event == "checkpoint_rejected") {
      ++lines;
      EXPECT_EQ(fields.at("path").rfind(odd.string(), 0), 0u) << line;
    }
    if (event == "checkpoint_rejected") {
      EXPECT_NE(fields.at("reason").find("step_2.pt"), std::string::npos) << line;
      EXPECT_EQ(fields.at("quarantined_to"), (odd / ".spotvisor-quarantine" / "step_2.pt").string()) << line;
    }
  }
  EXPECT_GE(lines, 3) << logs.Joined();  // two validated, one rejected
}

TEST_F(CheckpointCatalog, SelectionQuarantinesFallsBackAndLeavesTempNamesAlone) {
  for (int step : {10, 20}) fs::copy_file(Fixture("model.pt"), dir_ / ("step_" + std::to_string(step) + ".pt"));
  Edited("step_30.pt", [](std::string& b) { b.resize(b.size() / 2); });
  fs::copy_file(Fixture("model.pt"), dir_ / "step_40.pt.tmp");
  fs::create_directories(dir_ / "tmp-step_50.pt");
  auto catalog = MakeCatalog("step_{step}.pt");
  ASSERT_TRUE(catalog) << catalog.error().message;
  auto dry = catalog->Select(/*act=*/false);
  ASSERT_TRUE(dry);
  ASSERT_TRUE(dry->chosen);
  EXPECT_EQ(dry->chosen->path, dir_ / "step_20.pt");
  EXPECT_TRUE(fs::exists(dir_ / "step_30.pt")) << "a dry selection moves nothing";
  EXPECT_FALSE(fs::exists(tmp_ / "state")) << "a dry selection writes nothing";
  auto sel = catalog->Select(/*act=*/true);
  ASSERT_TRUE(sel);
  ASSERT_TRUE(sel->chosen);
  EXPECT_EQ(sel->chosen->step, 20u);
  ASSERT_EQ(sel->rejected.size(), 1u);
  EXPECT_NE(sel->rejected[0].reason.find("no end-of-central-directory record"), std::string::npos);
  ASSERT_TRUE(sel->rejected[0].moved_to);
  EXPECT_EQ(*sel->rejected[0].moved_to, dir_ / ".spotvisor-quarantine" / "step_30.pt");
  EXPECT_FALSE(fs::exists(dir_ / "step_30.pt"));
  EXPECT_TRUE(fs::exists(dir_ / "step_40.pt.tmp"));
  EXPECT_TRUE(fs::exists(tmp_ / "state" / "checkpoint-cache.tsv"));
  // The temp entries are reported (with their size), not counted and not deleted; the
  // quarantine is ours and is not one of them.
  ASSERT_EQ(sel->temp_left.size(), 2u);
  EXPECT_EQ(sel->temp_left[0], dir_ / "step_40.pt.tmp");
  EXPECT_EQ(sel->temp_left[1], dir_ / "tmp-step_50.pt");
  EXPECT_EQ(sel->temp_left_bytes, fs::file_size(Fixture("model.pt")));
  EXPECT_TRUE(fs::exists(dir_ / "tmp-step_50.pt"));
}

TEST_F(CheckpointCatalog, CacheServesListingsButResumeRevalidates) {
  fs::copy_file(Fixture("model.pt"), dir_ / "step_1.pt");
  {
    auto catalog = MakeCatalog("step_{step}.pt");
    ASSERT_TRUE(catalog);
    auto entries = catalog->Scan();
    ASSERT_TRUE(entries);
    catalog->Judge(*entries, true);
    EXPECT_FALSE((*entries)[0].from_cache);
    ASSERT_TRUE(catalog->SaveCache());
  }
  auto catalog = MakeCatalog("step_{step}.pt");
  ASSERT_TRUE(catalog);
  auto entries = catalog->Scan();
  catalog->Judge(*entries, true);
  EXPECT_TRUE((*entries)[0].from_cache);
  EXPECT_TRUE((*entries)[0].verdict->good);
  // Same size, same mtime, same inode, different bytes: only a real validation sees it.
  const auto mtime = fs::last_write_time(dir_ / "step_1.pt");
  std::string bytes = ReadFile(dir_ / "step_1.pt");
  bytes[bytes.size() / 2] ^= 1;
  std::fstream(dir_ / "step_1.pt", std::ios::in | std::ios::out | std::ios::binary).write(bytes.data(), bytes.size());
  fs::last_write_time(dir_ / "step_1.pt", mtime);
  auto listed = catalog->Scan();
  catalog->Judge(*listed, true);
  EXPECT_TRUE((*listed)[0].from_cache);
  auto sel = catalog->Select(false);
  ASSERT_TRUE(sel);
  EXPECT_FALSE(sel->chosen) << "the resume candidate is re-validated whatever the cache says";
}

TEST_F(CheckpointCatalog, RetentionLatestLinkAndHints) {
  for (int step : {1, 2, 3, 4}) fs::copy_file(Fixture("model.pt"), dir_ / ("step_" + std::to_string(step) + ".pt"));
  Edited("step_5.pt", [](std::string& b) { b.resize(100); });
  WriteFile(dir_ / "latest", "step_5.pt");
  WriteFile(dir_ / "latest_checkpointed_iteration.txt", "5\n");
  CatalogOptions o;
  o.dir = dir_;
  o.pattern = "step_{step}.pt";
  o.validator.pool = &pool_;
  o.keep = 2;
  o.latest_link = "current";
  o.rewrite_hints = true;
  auto catalog = Catalog::Create(o);
  ASSERT_TRUE(catalog);
  auto sel = catalog->Select(true);
  ASSERT_TRUE(sel && sel->chosen);
  EXPECT_EQ(sel->chosen->step, 4u);
  EXPECT_TRUE(fs::exists(dir_ / "step_4.pt"));
  EXPECT_TRUE(fs::exists(dir_ / "step_3.pt"));
  EXPECT_FALSE(fs::exists(dir_ / "step_2.pt"));
  EXPECT_FALSE(fs::exists(dir_ / "step_1.pt"));
  EXPECT_EQ(fs::read_symlink(dir_ / "current"), "step_4.pt");
  EXPECT_EQ(ReadFile(dir_ / "latest"), "step_4.pt");
  EXPECT_EQ(ReadFile(dir_ / "latest_checkpointed_iteration.txt"), "4\n");
}

TEST_F(CheckpointCatalog, CommandsAnswerAndNeverModify) {
  for (int step : {1, 2}) fs::copy_file(Fixture("model.pt"), dir_ / ("ckpt_step" + std::to_string(step) + ".pt"));
  Edited("ckpt_step3.pt", [](std::string& b) { b[b.size() / 2] ^= 4; });
  const std::vector<std::string> where = {"--dir",       dir_.string() + "/",      "--pattern", "ckpt_step{step}.pt",
                                          "--state-dir", (tmp_ / "state").string()};
  auto with = [&](std::vector<std::string> args) {
    args.insert(args.end(), where.begin(), where.end());
    return args;
  };
  std::string out;
  EXPECT_EQ(RunSpotvisor(with({"latest"}), &out), 0) << out;
  EXPECT_NE(out.find(dir_.string() + "/ckpt_step2.pt\n"), std::string::npos) << out;
  EXPECT_NE(out.find("skipped " + dir_.string() + "/ckpt_step3.pt"), std::string::npos) << out;
  EXPECT_EQ(RunSpotvisor(with({"checkpoints"}), &out), 1) << out;
  EXPECT_NE(out.find("BAD"), std::string::npos) << out;
  EXPECT_NE(out.find("CRC-32 mismatch"), std::string::npos) << out;
  EXPECT_EQ(RunSpotvisor(with({"checkpoints", "--json"}), &out), 1);
  EXPECT_NE(out.find("\"good\": false"), std::string::npos) << out;
  fs::create_directories(dir_ / ".tmp-ckpt_step4.pt-77");
  EXPECT_EQ(RunSpotvisor(with({"checkpoints"}), &out), 1) << out;
  EXPECT_NE(out.find("1 temp entry (0 B, half-written saves; never resumed from):\n  " + dir_.string() +
                     "/.tmp-ckpt_step4.pt-77\n"),
            std::string::npos)
      << out;
  fs::remove(dir_ / ".tmp-ckpt_step4.pt-77");
  EXPECT_EQ(RunSpotvisor({"validate", (dir_ / "ckpt_step3.pt").string()}, &out), 1);
  EXPECT_NE(out.find("BAD (full)"), std::string::npos) << out;
  EXPECT_EQ(RunSpotvisor({"validate", "--level", "format", (dir_ / "ckpt_step3.pt").string()}, &out), 0) << out;
  EXPECT_TRUE(fs::exists(dir_ / "ckpt_step3.pt"));
  EXPECT_FALSE(fs::exists(dir_ / ".spotvisor-quarantine"));
  EXPECT_FALSE(fs::exists(tmp_ / "state"));
  EXPECT_EQ(RunSpotvisor({"seal", (dir_ / "ckpt_step2.pt").string()}, &out), 0) << out;
  EXPECT_TRUE(fs::exists(dir_ / "ckpt_step2.pt.spotvisor.manifest.json"));
  fs::remove(dir_ / "ckpt_step1.pt");
  fs::remove(dir_ / "ckpt_step2.pt");
  EXPECT_EQ(RunSpotvisor(with({"latest"}), &out), 1) << out;
  EXPECT_NE(out.find("no good checkpoint"), std::string::npos) << out;
}

// The commands read a job file as well as --dir/--pattern; its checkpoints.format and
// validate level decide; the three levels answer differently on the same damage.
TEST_F(CheckpointCatalog, CommandsTakeAJobFileAndLevelsDiffer) {
  fs::copy_file(Fixture("model.pt"), dir_ / "ckpt_step1.pt");
  const std::string whole = ReadFile(Fixture("model.pt"));
  WriteFile(dir_ / "ckpt_step2.pt", whole.substr(0, whole.size() / 2));  // truncated
  std::string out;
  // structure: exists, not empty: the truncated file passes; format: its ZIP does not.
  EXPECT_EQ(RunSpotvisor({"validate", "--level", "structure", (dir_ / "ckpt_step2.pt").string()}, &out), 0) << out;
  EXPECT_EQ(RunSpotvisor({"validate", "--level", "format", (dir_ / "ckpt_step2.pt").string()}, &out), 1) << out;

  WriteFile(tmp_ / "job.yaml",
            "job:\n  command: [\"/bin/true\"]\ncheckpoints:\n  dir: ./ckpt\n"
            "  pattern: \"ckpt_step{step}.pt\"\ntelemetry:\n  state_dir: ./state\n");
  EXPECT_EQ(RunSpotvisor({"latest", "--config", (tmp_ / "job.yaml").string()}, &out), 0) << out;
  EXPECT_NE(out.find(dir_.string() + "/ckpt_step1.pt\n"), std::string::npos) << out;
  EXPECT_EQ(RunSpotvisor({"checkpoints", "--config", (tmp_ / "job.yaml").string()}, &out), 1) << out;
  EXPECT_NE(out.find("BAD"), std::string::npos) << out;
  // An entry that cannot be read (here a dangling link: root reads everything else) is
  // reported, and the listing and the selection go on.
  fs::create_symlink("gone-before-it-was-read", dir_ / "ckpt_step9.pt");
  EXPECT_EQ(RunSpotvisor({"checkpoints", "--config", (tmp_ / "job.yaml").string()}, &out), 1) << out;
  EXPECT_NE(out.find("ckpt_step9.pt"), std::string::npos) << out;
  EXPECT_NE(out.find("ckpt_step1.pt"), std::string::npos) << out;
  EXPECT_EQ(RunSpotvisor({"latest", "--config", (tmp_ / "job.yaml").string()}, &out), 0) << out;
  EXPECT_NE(out.find(dir_.string() + "/ckpt_step1.pt\n"), std::string::npos) << out;
  fs::remove(dir_ / "ckpt_step9.pt");

  // Anything else is judged by manifest or, with format: any, by being readable.
  fs::create_directories(tmp_ / "other");
  WriteFile(tmp_ / "other" / "blob_3", "opaque bytes of some other framework");
  const std::string other =
      "job:\n  command: [\"/bin/true\"]\ncheckpoints:\n  dir: ./other\n"
      "  pattern: \"blob_{step}\"\n";
  WriteFile(tmp_ / "other.yaml", other + "telemetry:\n  state_dir: ./state\n");
  EXPECT_EQ(RunSpotvisor({"latest", "--config", (tmp_ / "other.yaml").string()}, &out), 1) << out;
  WriteFile(tmp_ / "any.yaml", other + "  format: any\ntelemetry:\n  state_dir: ./state\n");
  EXPECT_EQ(RunSpotvisor({"latest", "--config", (tmp_ / "any.yaml").string()}, &out), 0) << out;
  EXPECT_NE(out.find((tmp_ / "other" / "blob_3").string() + "\n"), std::string::npos) << out;
  EXPECT_EQ(RunSpotvisor({"seal", (tmp_ / "other" / "blob_3").string()}, &out), 0) << out;
  EXPECT_EQ(RunSpotvisor({"latest", "--config", (tmp_ / "other.yaml").string()}, &out), 0) << out;  // by manifest
  EXPECT_FALSE(fs::exists(tmp_ / "state" / "checkpoint-cache.tsv")) << "latest and checkpoints never write";
}

// Room for the group: the selection lists every good step it knows, newest first, so that
// peers can intersect them. Safetensors directories (no torch needed).
class SelectionGoodSteps : public ::testing::Test {
 protected:
  SelectionGoodSteps() {
    for (int step : {10, 20, 30}) testing::WriteValidCheckpoint(dir_ / ("ckpt_step" + std::to_string(step)));
    fs::create_directories(dir_ / "ckpt_step40");  // empty: bad
  }
  Result<Catalog> Make(int keep = 0, bool judge_older = false) {
    CatalogOptions o;
    o.dir = dir_;
    o.pattern = "ckpt_step{step}";
    o.cache_file = tmp_ / "state" / "checkpoint-cache.tsv";
    o.keep = keep;
    o.judge_older = judge_older;
    return Catalog::Create(o);
  }
  static std::vector<std::uint64_t> Steps(const std::vector<ResumePoint>& points) {
    std::vector<std::uint64_t> out;
    for (const auto& p : points) out.push_back(p.step);
    return out;
  }
  TempDir tmp_;
  fs::path dir_ = tmp_ / "ckpt";
};

TEST_F(SelectionGoodSteps, TheChosenOneFirstThenTheOlderOnesJudgedGoodBefore) {
  {
    auto catalog = Make();
    ASSERT_TRUE(catalog) << catalog.error().message;
    auto sel = catalog->Select(/*act=*/true);
    ASSERT_TRUE(sel && sel->chosen);
    EXPECT_EQ(sel->chosen->step, 30u);
    // The older ones were never judged: not validated now (every byte, every start).
    EXPECT_EQ(Steps(sel->good), (std::vector<std::uint64_t>{30}));
    EXPECT_EQ(GoodSteps(*sel).size(), 1u);
    auto entries = catalog->Scan();
    ASSERT_TRUE(entries);
    catalog->Judge(*entries, /*use_cache=*/true);  // what the checkpoint watcher does as they appear
    ASSERT_TRUE(catalog->SaveCache());
  }
  auto catalog = Make();
  ASSERT_TRUE(catalog);
  auto sel = catalog->Select(/*act=*/true);
  ASSERT_TRUE(sel && sel->chosen);
  EXPECT_EQ(Steps(sel->good), (std::vector<std::uint64_t>{30, 20, 10}));
  EXPECT_EQ(sel->good.front().path, dir_ / "ckpt_step30");
  EXPECT_EQ(sel->good.back().path, dir_ / "ckpt_step10");
  EXPECT_TRUE(fs::exists(dir_ / ".spotvisor-quarantine" / "ckpt_step40"));  // the bad one: quarantined, never good
  EXPECT_EQ(Steps(catalog->Select(/*act=*/false)->good), (std::vector<std::uint64_t>{30, 20, 10}));
  // A good one that changed since its verdict is left out until judged again.
  testing::WriteFile(dir_ / "ckpt_step20" / "extra.txt", "x");
  EXPECT_EQ(Steps(catalog->Select(/*act=*/false)->good), (std::vector<std::uint64_t>{30, 10}));
}

// A multi-node group (coordination.etcd: judge_older) needs every good step at once: the
// older ones are judged in the selection, once (the cache keeps their verdicts).
TEST_F(SelectionGoodSteps, AGroupsSelectionJudgesTheOlderOnesToo) {
  testing::WriteFile(dir_ / "ckpt_step20" / "model.safetensors", "not safetensors");  // 20 turns bad
  testing::LogCapture log;
  {
    auto catalog = Make(/*keep=*/0, /*judge_older=*/true);
    ASSERT_TRUE(catalog) << catalog.error().message;
    auto sel = catalog->Select(/*act=*/true);
    ASSERT_TRUE(sel && sel->chosen);
    EXPECT_EQ(Steps(sel->good), (std::vector<std::uint64_t>{30, 10}));
    EXPECT_EQ(log.Count("for=\"the group"), 2) << log.Joined();
  }
  auto catalog = Make(/*keep=*/0, /*judge_older=*/true);
  ASSERT_TRUE(catalog);
  auto sel = catalog->Select(/*act=*/true);
  ASSERT_TRUE(sel);
  EXPECT_EQ(Steps(sel->good), (std::vector<std::uint64_t>{30, 10}));
  EXPECT_EQ(log.Count("for=\"the group"), 2) << "judged once: " << log.Joined();
}

TEST_F(SelectionGoodSteps, RetentionsDeletionsAreNotAmongThem) {
  auto catalog = Make(/*keep=*/2);
  ASSERT_TRUE(catalog);
  auto sel = catalog->Select(/*act=*/true);
  ASSERT_TRUE(sel && sel->chosen);
  EXPECT_FALSE(fs::exists(dir_ / "ckpt_step10"));
  EXPECT_EQ(Steps(sel->good), (std::vector<std::uint64_t>{30, 20}));  // retention judged them all
}

TEST_F(SelectionGoodSteps, NothingGoodIsAnEmptyList) {
  fs::remove_all(dir_);
  fs::create_directories(dir_ / "ckpt_step5");
  auto catalog = Make();
  ASSERT_TRUE(catalog);
  auto sel = catalog->Select(/*act=*/true);
  ASSERT_TRUE(sel);
  EXPECT_FALSE(sel->chosen);
  EXPECT_TRUE(sel->good.empty());
  EXPECT_TRUE(GoodSteps(*sel).empty());
  Selection only_chosen;  // a selector that fills `chosen` alone
  only_chosen.chosen = ResumePoint{dir_ / "ckpt_step5", 5};
  EXPECT_EQ(Steps(GoodSteps(only_chosen)), (std::vector<std::uint64_t>{5}));
}

}  // namespace
}  // namespace spotvisor::checkpoint

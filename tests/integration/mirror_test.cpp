// The off-machine mirror end to end with the plain-Python trainer: checkpoints are mirrored
// while it runs (directory form; and Debian's rclone with a local remote for the command
// form), the run is stopped, and a "new machine" (empty checkpoint and state dirs, same
// mirror) restores the newest good checkpoint and ends with the uninterrupted result.
#include <gtest/gtest.h>
#include <signal.h>

#include <nlohmann/json.hpp>
#include <thread>

#include "support/test_support.hpp"

namespace spotvisor {
namespace {

using namespace std::chrono_literals;
using testing::ReadFile;
using testing::Spawn;
using testing::TempDir;
using testing::WaitExit;
using testing::WaitUntil;
using testing::WriteFile;

const std::string kPython = "/usr/bin/python3";
const std::string kTrainer = std::string(SPOTVISOR_SOURCE_DIR) + "/examples/plain_trainer/train.py";

std::string Reference(const TempDir& dir) {
  auto run = Spawn({kPython, kTrainer, "--ckpt-dir", (dir / "ref-ckpt").string(), "--steps", "80", "--result-file",
                    (dir / "ref-result").string()},
                   dir / "ref-out.txt");
  EXPECT_EQ(WaitExit(run.pid), 0) << ReadFile(dir / "ref-out.txt");
  return ReadFile(dir / "ref-result");
}

std::string Job(const std::string& machine, const std::string& mirror) {
  return "job:\n  name: m\n  command: [\"" + kPython + "\", \"" + kTrainer +
         "\", \"--ckpt-dir\", \"{checkpoint_dir}\", " +
         "\"--steps\", \"80\", \"--step-sleep\", \"0.08\", \"--checkpoint-every\", \"10\", \"--keep\", \"5\", " +
         "\"--result-file\", \"{result_file}\"]\n  resume_args: [\"--resume_from={checkpoint}\"]\n" +
         "  result_file: ./" + machine + "-result\n" + "checkpoints:\n  dir: ./" + machine +
         "-ckpt\n  pattern: \"ckpt_step{step}\"\n  keep: 5\n" + mirror + "signals:\n  grace: 5s\n  kill_timeout: 5s\n" +
         "restart:\n  backoff: {initial: 1ms, max: 10ms, multiplier: 2, jitter: 0}\n" + "telemetry:\n  state_dir: ./" +
         machine + "-state\n";
}

int Entries(const std::filesystem::path& dir, const std::string& prefix) {
  int n = 0;
  std::error_code ec;
  for (std::filesystem::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
    n += it->path().filename().string().rfind(prefix, 0) == 0;
  }
  return n;
}

// Machine A runs until a first checkpoint shows up in `mirror_dir`, then is stopped
// (SIGTERM, exit 75); machine B starts empty and must restore and finish exactly.
void StopThenRestoreElsewhere(const TempDir& dir, const std::string& mirror_yaml,
                              const std::filesystem::path& mirror_dir) {
  const std::string expected = Reference(dir);
  WriteFile(dir / "a.yaml", Job("a", mirror_yaml));
  auto a = Spawn({SPOTVISOR_BINARY, "run", "--config", (dir / "a.yaml").string()}, dir / "a-out.txt");
  ASSERT_TRUE(WaitUntil([&] { return Entries(mirror_dir, "ckpt_step") > 0; }, 30s)) << ReadFile(dir / "a-out.txt");
  kill(a.pid, SIGTERM);
  ASSERT_EQ(WaitExit(a.pid, 60s), 75) << ReadFile(dir / "a-out.txt");
  EXPECT_NE(ReadFile(dir / "a-out.txt").find("event=mirrored"), std::string::npos) << ReadFile(dir / "a-out.txt");
  EXPECT_FALSE(std::filesystem::exists(dir / "a-result"));

  WriteFile(dir / "b.yaml", Job("b", mirror_yaml));
  std::string out;
  ASSERT_EQ(testing::RunSpotvisor({"run", "--config", (dir / "b.yaml").string()}, &out, 60s), 0) << out;
  EXPECT_NE(out.find("event=mirror_restored"), std::string::npos) << out;
  EXPECT_NE(out.find("[trainer] resumed from=" + (dir / "b-ckpt").string()), std::string::npos) << out;
  EXPECT_EQ(ReadFile(dir / "b-result"), expected) << out;
}

TEST(Mirror, DirectoryMirrorRestoresOntoANewMachineThatResumesExactly) {
  TempDir dir;
  const std::string mirror =
      "  mirror:\n    path: " + (dir / "bucket").string() + "\n    keep: 2\n    bandwidth: 64MiB\n";
  WriteFile(dir / "b.yaml", Job("b", mirror));
  std::string status;
  ASSERT_EQ(testing::RunSpotvisor({"status", "--config", (dir / "b.yaml").string()}, &status), 0) << status;
  EXPECT_NE(status.find("job m on this machine: no run yet"), std::string::npos) << status;
  StopThenRestoreElsewhere(dir, mirror, dir / "bucket");
  EXPECT_LE(Entries(dir / "bucket", "ckpt_step"), 2);   // retention on the mirror
  EXPECT_EQ(Entries(dir / "bucket", ".spotvisor"), 0);  // no temp copies left
  // `spotvisor status` on machine B: what is durable, and the planner's verdict.
  ASSERT_EQ(testing::RunSpotvisor({"status", "--config", (dir / "b.yaml").string()}, &status), 0) << status;
  EXPECT_NE(status.find("job m on this machine: finished, 1 attempt"), std::string::npos) << status;
  EXPECT_NE(status.find("  durable: ckpt_step80 (step 80, "), std::string::npos) << status;
  EXPECT_NE(status.find("  planner: save "), std::string::npos) << status;
  EXPECT_NE(status.find("the warning window is 30.0 s: fits, "), std::string::npos) << status;
  ASSERT_EQ(testing::RunSpotvisor({"status", "--config", (dir / "b.yaml").string(), "--json"}, &status), 0) << status;
  const auto local = nlohmann::json::parse(status.substr(status.find('{')))["local"];
  EXPECT_EQ(local["phase"], "finished") << local;
  EXPECT_EQ(local["durability"]["newest_durable"]["step"], 80) << local;
  EXPECT_EQ(local["durability"]["uploading"].size(), 0u) << local;
  EXPECT_EQ(local["durability"]["plan"]["fits"], true) << local;
  EXPECT_EQ(local["durability"]["plan"]["window_s"], 30.0) << local;
}

// A machine whose local checkpoints are older than the mirror's (a disk restored from an
// old snapshot) restores the mirror's newest, resumes from it and ends exactly.
TEST(Mirror, AnOlderLocalCheckpointGivesWayToTheMirrorsNewest) {
  TempDir dir;
  const std::string expected = Reference(dir);
  const std::string mirror = "  mirror:\n    path: " + (dir / "bucket").string() + "\n    keep: 2\n";
  // 16 s of training, so that the stop below comes before the end even on a loaded machine,
  // and every checkpoint kept (step 10 is copied below whenever the stop comes).
  std::string job = Job("a", mirror);
  job.replace(job.find("\"0.08\""), 6, "\"0.20\"");
  job.replace(job.find("\"--keep\", \"5\""), 13, "\"--keep\", \"0\"");
  job.replace(job.find("  keep: 5\n"), 10, "  keep: 0\n");
  WriteFile(dir / "a.yaml", job);
  auto a = Spawn({SPOTVISOR_BINARY, "run", "--config", (dir / "a.yaml").string()}, dir / "a-out.txt");
  // Any checkpoint newer than 10 on the mirror (a loaded machine's first scan may see only a later one).
  const auto mirrored_past_10 = [&] {
    if (!std::filesystem::exists(dir / "bucket")) return false;
    for (const auto& e : std::filesystem::directory_iterator(dir / "bucket")) {
      const std::string name = e.path().filename().string();
      if (name.rfind("ckpt_step", 0) == 0 && name != "ckpt_step10") return true;
    }
    return false;
  };
  ASSERT_TRUE(WaitUntil(mirrored_past_10, 30s)) << ReadFile(dir / "a-out.txt");
  kill(a.pid, SIGTERM);
  ASSERT_EQ(WaitExit(a.pid, 60s), 75) << ReadFile(dir / "a-out.txt");

  std::filesystem::create_directories(dir / "b-ckpt");
  std::filesystem::copy(dir / "a-ckpt" / "ckpt_step10", dir / "b-ckpt" / "ckpt_step10",
                        std::filesystem::copy_options::recursive);
  WriteFile(dir / "b.yaml", Job("b", mirror));
  std::string out;
  ASSERT_EQ(testing::RunSpotvisor({"run", "--config", (dir / "b.yaml").string()}, &out, 60s), 0) << out;
  EXPECT_NE(out.find("event=mirror_restored"), std::string::npos) << out;
  EXPECT_NE(out.find("local_step=10"), std::string::npos) << out;
  EXPECT_EQ(out.find("[trainer] resumed from=" + (dir / "b-ckpt" / "ckpt_step10").string() + " "), std::string::npos)
      << "resumed from the older local checkpoint\n"
      << out;
  EXPECT_NE(out.find("[trainer] resumed from=" + (dir / "b-ckpt").string()), std::string::npos) << out;
  EXPECT_EQ(ReadFile(dir / "b-result"), expected) << out;
}

// A trainer (the child helper) beside a 16 MiB checkpoint that a path mirror copies at
// `bandwidth`; returns spotvisor once the copy is under way (its temp entry is there).
testing::Spawned StartWithASlowCopy(const TempDir& dir, const std::string& bandwidth, const std::string& timeout) {
  std::filesystem::create_directories(dir / "ckpt" / "ckpt_step5");
  WriteFile(dir / "ckpt" / "ckpt_step5" / "blob", std::string(16 << 20, 'w'));
  WriteFile(dir / "job.yaml", "job:\n  name: slow\n  command: [\"" + std::string(SPOTVISOR_CHILD_HELPER) +
                                  "\", \"--mode=checkpoint\", \"--ready=" + (dir / "ready").string() +
                                  "\"]\n"
                                  "checkpoints:\n  dir: ./ckpt\n  pattern: \"ckpt_step{step}\"\n  format: any\n"
                                  "  mirror:\n    path: " +
                                  (dir / "bucket").string() + "\n    bandwidth: " + bandwidth +
                                  "\n    timeout: " + timeout +
                                  "\n"
                                  "signals:\n  grace: 5s\ntelemetry:\n  state_dir: ./state\n");
  auto sv = Spawn({SPOTVISOR_BINARY, "run", "--config", (dir / "job.yaml").string()}, dir / "out.txt");
  EXPECT_TRUE(WaitUntil([&] { return std::filesystem::exists(dir / "ready"); })) << ReadFile(dir / "out.txt");
  EXPECT_TRUE(WaitUntil([&] { return Entries(dir / "bucket", ".spotvisor") > 0; }, 10s))
      << "the copy of ckpt_step5 is under way\n"
      << ReadFile(dir / "out.txt");
  return sv;
}

// A mirror copy in flight (16 MiB at 1 MiB/s) never holds back a stop: the trainer gets
// its signal at once; the upload then gets at most mirror.timeout before spotvisor exits.
TEST(Mirror, ACopyInFlightNeverDelaysAStop) {
  TempDir dir;
  auto sv = StartWithASlowCopy(dir, "1MiB", "2s");
  const auto stop = std::chrono::steady_clock::now();
  kill(sv.pid, SIGTERM);
  ASSERT_TRUE(WaitUntil(
      [&] { return ReadFile(dir / "out.txt").find("event=signal_sent signal=SIGTERM") != std::string::npos; }, 8s))
      << ReadFile(dir / "out.txt");
  EXPECT_EQ(WaitExit(sv.pid, 30s), 75) << ReadFile(dir / "out.txt");
  EXPECT_LT(std::chrono::steady_clock::now() - stop, 10s) << "bounded by mirror.timeout, not by the 16 s copy";
}

// After the exit line spotvisor still lets the mirror's uploads finish (here for up to
// mirror.timeout, an hour: no notice gave a deadline). A SIGTERM then ends that wait at once:
// a user or systemd that wants it gone is never ignored, and spotvisor still ends the way
// its exit line said, its state saved (never killed by the signal's default action).
TEST(Mirror, ASigtermAfterTheExitLineEndsTheLastUploadsWait) {
  TempDir dir;
  auto sv = StartWithASlowCopy(dir, "256KiB", "1h");
  kill(sv.pid, SIGTERM);
  ASSERT_TRUE(WaitUntil([&] { return ReadFile(dir / "out.txt").find("event=exit code=75") != std::string::npos; }, 30s))
      << ReadFile(dir / "out.txt");
  EXPECT_TRUE(testing::ProcessAlive(sv.pid)) << "the 64 s upload is still under way\n" << ReadFile(dir / "out.txt");
  // "Checkpoint now" asks for nothing once the trainer is gone: the upload goes on.
  kill(sv.pid, SIGUSR1);
  std::this_thread::sleep_for(500ms);
  EXPECT_TRUE(testing::ProcessAlive(sv.pid)) << ReadFile(dir / "out.txt");
  EXPECT_EQ(ReadFile(dir / "out.txt").find("event=mirror_abandoned"), std::string::npos) << ReadFile(dir / "out.txt");
  kill(sv.pid, SIGTERM);
  EXPECT_EQ(WaitExit(sv.pid, 10s), 75) << "spotvisor ignored a SIGTERM after its exit line, or died of it\n"
                                       << ReadFile(dir / "out.txt");
  const std::string out = ReadFile(dir / "out.txt");
  EXPECT_NE(out.find("event=mirror_abandoned uploading=ckpt_step5 "), std::string::npos) << out;
  EXPECT_NE(out.find("a stop signal arrived after the exit line"), std::string::npos) << out;
  EXPECT_NE(ReadFile(dir / "state" / "state.json").find("\"last_exit_message\": \"stopped"), std::string::npos)
      << ReadFile(dir / "state" / "state.json");
}

TEST(Mirror, RcloneCommandWithALocalRemote) {
  if (std::system("rclone version > /dev/null 2>&1") != 0)
    GTEST_SKIP() << "rclone is not installed (apt-get install rclone)";
  TempDir dir;
  const std::string remote = ":local:" + (dir / "remote").string();
  const std::string mirror =
      "  mirror:\n    keep: 2\n"
      "    command: [\"rclone\", \"copy\", \"--config\", \"/dev/null\", \"{checkpoint}\", \"" +
      remote +
      "/{job}/{name}\"]\n"
      "    prune_command: [\"rclone\", \"purge\", \"--config\", \"/dev/null\", \"" +
      remote +
      "/{job}/{name}\"]\n"
      "    restore_command: [\"rclone\", \"copy\", \"--config\", \"/dev/null\", \"" +
      remote +
      "/{job}\", \"{restore_dir}\"]\n"
      "    timeout: 60s\n";
  StopThenRestoreElsewhere(dir, mirror, dir / "remote" / "m");
  EXPECT_LE(Entries(dir / "remote" / "m", "ckpt_step"), 2);
}

// The object-store form (checkpoints.mirror.remote): spotvisor runs rclone itself (here
// with a local remote; tests/e2e/test_durable.py runs it against an S3 server). Each
// checkpoint gets its marker after its last byte; retention deletes marker and checkpoint;
// a new machine restores the newest marked one. A copy without its marker (an upload cut
// short, here one of a later step) is never restored.
TEST(Mirror, RemoteMirrorMarksWhatIsWholeAndRestoresOnlyThat) {
  if (std::system("rclone version > /dev/null 2>&1") != 0)
    GTEST_SKIP() << "rclone is not installed (apt-get install rclone)";
  TempDir dir;
  const auto bucket = dir / "remote" / "jobs";
  const std::string mirror = "  mirror:\n    keep: 2\n    remote: \":local:" + bucket.string() +
                             "\"\n    rclone_flags: [\"--config\", \"/dev/null\"]\n    timeout: 60s\n";
  const std::string expected = Reference(dir);
  WriteFile(dir / "a.yaml", Job("a", mirror));
  auto a = Spawn({SPOTVISOR_BINARY, "run", "--config", (dir / "a.yaml").string()}, dir / "a-out.txt");
  ASSERT_TRUE(WaitUntil([&] { return Entries(bucket / ".spotvisor-complete", "ckpt_step") > 0; }, 30s))
      << ReadFile(dir / "a-out.txt");
  kill(a.pid, SIGTERM);
  ASSERT_EQ(WaitExit(a.pid, 60s), 75) << ReadFile(dir / "a-out.txt");
  EXPECT_LE(Entries(bucket / ".spotvisor-complete", "ckpt_step"), 2) << ReadFile(dir / "a-out.txt");
  // Every marker has its checkpoint, and retention left no checkpoint without a marker.
  EXPECT_EQ(Entries(bucket, "ckpt_step"), Entries(bucket / ".spotvisor-complete", "ckpt_step"))
      << ReadFile(dir / "a-out.txt");
  // `spotvisor checkpoints` says which local checkpoints are on the mirror.
  std::string listing;
  testing::RunSpotvisor({"checkpoints", "--config", (dir / "a.yaml").string()}, &listing);
  EXPECT_NE(listing.find("DURABLE"), std::string::npos) << listing;
  EXPECT_NE(listing.find("  durable  "), std::string::npos) << listing;
  // A later step whose upload was cut short: its bytes are there, its marker is not.
  std::filesystem::copy(dir / "a-ckpt" / "ckpt_step10", bucket / "ckpt_step79",
                        std::filesystem::copy_options::recursive);

  WriteFile(dir / "b.yaml", Job("b", mirror));
  std::string out;
  ASSERT_EQ(testing::RunSpotvisor({"run", "--config", (dir / "b.yaml").string()}, &out, 60s), 0) << out;
  EXPECT_NE(out.find("event=mirror_restored"), std::string::npos) << out;
  EXPECT_EQ(out.find("ckpt_step79"), std::string::npos) << "restored a copy without its marker\n" << out;
  const auto durable = testing::ReadFile(dir / "b-state" / "durability.json");
  EXPECT_NE(durable.find("restored from the mirror"), std::string::npos) << durable;
  EXPECT_NE(out.find("[trainer] resumed from=" + (dir / "b-ckpt").string()), std::string::npos) << out;
  EXPECT_EQ(ReadFile(dir / "b-result"), expected) << out;
}

// checkpoints.mirror.concurrency bounds the uploads in flight: with a slow command mirror
// (each upload 2.5 s; the first one starts at the first checkpoint scan, the last one at
// the trainer's exit) exactly that many run at once, never more, and the last checkpoint
// is always mirrored.
TEST(Mirror, ConcurrencyBoundsTheUploadsInFlight) {
  for (const int concurrency : {1, 2}) {
    SCOPED_TRACE("concurrency " + std::to_string(concurrency));
    TempDir dir;
    // Each upload marks itself running, records how many are, copies slowly, unmarks.
    WriteFile(dir / "upload.sh",
              "set -e\nmkdir -p \"$3/running\" \"$3/remote\"\ntouch \"$3/running/$2\"\n"
              // Unmarked however it ends (the trainer's own retention may delete a checkpoint
              // before its slow upload copies it).
              "trap 'rm -f \"$3/running/$2\"' EXIT\n"
              "ls \"$3/running\" | wc -l >> \"$3/in-flight.log\"\nsleep 2.5\n"
              "cp -r \"$1\" \"$3/remote/$2\"\n");
    const std::string mirror = "  mirror:\n    concurrency: " + std::to_string(concurrency) +
                               "\n    restore: false\n    timeout: 60s\n"
                               "    command: [\"/bin/sh\", \"" +
                               (dir / "upload.sh").string() + "\", \"{checkpoint}\", \"{name}\", \"" +
                               dir.path().string() + "\"]\n";
    std::string job = Job("a", mirror);
    job.replace(job.find("\"0.08\""), 6, "\"0.04\"");
    WriteFile(dir / "a.yaml", job);
    std::string out;
    ASSERT_EQ(testing::RunSpotvisor({"run", "--config", (dir / "a.yaml").string()}, &out, 60s), 0) << out;
    int peak = 0;
    for (const auto& line : testing::ReadLines(dir / "in-flight.log")) peak = std::max(peak, std::stoi(line));
    EXPECT_EQ(peak, concurrency) << ReadFile(dir / "in-flight.log") << out;
    EXPECT_TRUE(std::filesystem::exists(dir / "remote" / "ckpt_step80")) << out;
    EXPECT_GE(testing::ReadLines(dir / "in-flight.log").size(), 2u) << out;  // the first scan's, the last
  }
}

// Issue 36, at 1 KiB/s (4 s an upload) with checkpoints.keep 2 and a checkpoint every 0.4 s for 8 s: uploads fall
// behind and supersede each other. Local retention never deletes a checkpoint that is being
// uploaded or is newer than the newest one on the mirror (it says so, once each), so no
// upload loses its source; the last checkpoint reaches the mirror at exit, and spotvisor
// exits once it has (a superseded upload no longer leaves it waiting for mirror.timeout).
TEST(Mirror, ASlowMirrorNeverLosesWhatItUploadsToRetentionAndSpotvisorExitsOnceDone) {
  TempDir dir;
  const std::string mirror =
      "  mirror:\n    path: " + (dir / "bucket").string() + "\n    bandwidth: 1KiB\n    timeout: 1h\n";
  std::string job = Job("a", mirror);
  job.replace(job.find("\"0.08\""), 6, "\"0.04\"");
  job.replace(job.find("\"--steps\", \"80\""), 15, "\"--steps\", \"200\"");
  job.replace(job.find("\"--keep\", \"5\""), 13, "\"--keep\", \"0\"");
  job.replace(job.find("  keep: 5\n"), 10, "  keep: 2\n");
  WriteFile(dir / "a.yaml", job);
  std::string out;
  // With the count of a superseded upload wrong, spotvisor would wait out mirror.timeout (1 h).
  ASSERT_EQ(testing::RunSpotvisor({"run", "--config", (dir / "a.yaml").string()}, &out, 180s), 0) << out;
  EXPECT_EQ(out.find("event=mirror_failed"), std::string::npos) << "retention deleted an upload's source\n" << out;
  EXPECT_NE(out.find("event=retention_held"), std::string::npos) << out;
  EXPECT_NE(out.find("event=mirror_superseded"), std::string::npos) << "uploads never fell behind\n" << out;
  EXPECT_TRUE(std::filesystem::exists(dir / "bucket" / "ckpt_step200")) << out;
  EXPECT_EQ(out.find("event=mirror_abandoned"), std::string::npos) << out;
}

// A trainer that saves a two-file directory checkpoint on SIGTERM: a.safetensors whole and
// closed, then b.safetensors half written and held open until `go` exists, then the rest.
const char* kTwoFileSaver = R"PY(
import json, os, signal, struct, sys, time
ckpt, go = sys.argv[1], sys.argv[2]
stop = False
def on_term(signum, frame):
    global stop
    stop = True
signal.signal(signal.SIGTERM, on_term)
def header(count):
    h = json.dumps({"t": {"dtype": "F32", "shape": [count], "data_offsets": [0, 4 * count]}}).encode()
    h += b" " * (-len(h) % 8)
    return struct.pack("<Q", len(h)) + h
print("[saver] ready", flush=True)
while not stop:
    time.sleep(0.05)
d = os.path.join(ckpt, "ckpt_step5")
os.makedirs(d)
with open(os.path.join(d, "a.safetensors"), "wb") as f:
    f.write(header(4096) + b"\x00" * 4 * 4096)
with open(os.path.join(d, "b.safetensors"), "wb") as f:
    f.write(header(8192) + b"\x01" * 4 * 4096)
    f.flush()
    print("[saver] b half written", flush=True)
    while not os.path.exists(go):
        time.sleep(0.05)
    f.write(b"\x01" * 4 * 4096)
print("[saver] saved step=5", flush=True)
)PY";

// Issue 36: on an object store, a directory checkpoint saved for a stop goes up file by file
// as the trainer closes each: a.safetensors is on the remote while b.safetensors is still
// being written (and is not: it is open), with no marker; once b is closed and the
// checkpoint validates, the upload after the verdict sends the rest and writes the marker.
TEST(Mirror, AStopsDirectoryCheckpointGoesUpFileByFileAsEachClosesAndIsMarkedOnlyAfterItsVerdict) {
  if (std::system("rclone version > /dev/null 2>&1") != 0)
    GTEST_SKIP() << "rclone is not installed (apt-get install rclone)";
  TempDir dir;
  const auto bucket = dir / "remote" / "jobs";
  WriteFile(dir / "saver.py", kTwoFileSaver);
  WriteFile(dir / "job.yaml", "job:\n  name: early\n  command: [\"" + kPython + "\", \"" + (dir / "saver.py").string() +
                                  "\", \"{checkpoint_dir}\", \"" + (dir / "go").string() +
                                  "\"]\ncheckpoints:\n  dir: ./ckpt\n  pattern: \"ckpt_step{step}\"\n"
                                  "  mirror:\n    remote: \":local:" +
                                  bucket.string() +
                                  "\"\n    rclone_flags: [\"--config\", \"/dev/null\"]\n    timeout: 60s\n"
                                  "signals:\n  grace: 60s\n  kill_timeout: 5s\ntelemetry:\n  state_dir: ./state\n");
  auto sv = Spawn({SPOTVISOR_BINARY, "run", "--config", (dir / "job.yaml").string()}, dir / "out.txt");
  ASSERT_TRUE(WaitUntil([&] { return ReadFile(dir / "out.txt").find("[saver] ready") != std::string::npos; }, 30s))
      << ReadFile(dir / "out.txt");
  kill(sv.pid, SIGTERM);
  ASSERT_TRUE(WaitUntil([&] { return ReadFile(dir / "out.txt").find("b half written") != std::string::npos; }, 30s))
      << ReadFile(dir / "out.txt");
  const auto local = dir / "ckpt" / "ckpt_step5";
  ASSERT_TRUE(WaitUntil(
      [&] { return ReadFile(bucket / "ckpt_step5" / "a.safetensors") == ReadFile(local / "a.safetensors"); }, 30s))
      << ReadFile(dir / "out.txt");
  EXPECT_FALSE(std::filesystem::exists(bucket / "ckpt_step5" / "b.safetensors")) << "a file still open went up";
  EXPECT_FALSE(std::filesystem::exists(bucket / ".spotvisor-complete" / "ckpt_step5.json"))
      << "marked complete before its verdict";
  WriteFile(dir / "go", "");
  ASSERT_EQ(WaitExit(sv.pid, 60s), 75) << ReadFile(dir / "out.txt");
  const std::string out = ReadFile(dir / "out.txt");
  EXPECT_NE(out.find("event=mirror_early name=ckpt_step5 step=5"), std::string::npos) << out;
  EXPECT_NE(out.find("event=mirrored name=ckpt_step5 "), std::string::npos) << out;
  EXPECT_TRUE(std::filesystem::exists(bucket / ".spotvisor-complete" / "ckpt_step5.json")) << out;
  EXPECT_EQ(ReadFile(bucket / "ckpt_step5" / "b.safetensors"), ReadFile(local / "b.safetensors")) << out;
  EXPECT_EQ(ReadFile(bucket / "ckpt_step5" / "a.safetensors"), ReadFile(local / "a.safetensors")) << out;
}

}  // namespace
}  // namespace spotvisor

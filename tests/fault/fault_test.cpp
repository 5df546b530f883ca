// Faults provoked on one machine, with "nothing lost" as the assertion: the job ends with
// the result of an uninterrupted run, no trainer outlives its supervisor, and the log says
// what happened. The trainer is the real plain-Python example (deterministic, exact
// resume). Filesystem faults use a small tmpfs of the test's own and skip, saying why,
// where mounting is not allowed.
#include <gtest/gtest.h>
#include <poll.h>
#include <signal.h>
#include <sys/inotify.h>
#include <sys/mount.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <thread>

#include "support/plain_trainer.hpp"
#include "support/test_support.hpp"

namespace spotvisor {
namespace {

using namespace std::chrono_literals;
using testing::Count;
using testing::PlainJob;
using testing::ProcessAlive;
using testing::ReadFile;
using testing::Spawn;
using testing::TempDir;
using testing::TrainerJob;
using testing::TrainerPid;
using testing::UninterruptedDigest;
using testing::WaitExit;
using testing::WaitUntil;
using testing::WriteFile;

constexpr const char* kQuickRestart = "restart:\n  backoff: {initial: 1ms, max: 10ms, multiplier: 2, jitter: 0}\n";

// A tmpfs of `size` at `dir`, unmounted on destruction; !mounted() where not allowed.
class SmallFilesystem {
 public:
  SmallFilesystem(const std::filesystem::path& dir, const std::string& size) : dir_(dir) {
    std::filesystem::create_directories(dir);
    const std::string options = "size=" + size + ",mode=0755";
    if (::mount("tmpfs", dir.c_str(), "tmpfs", 0, options.c_str()) == 0) {
      mounted_ = true;
    } else {
      why_ = std::string("cannot mount a tmpfs here (") + std::strerror(errno) + "); run as root to include this case";
    }
  }
  ~SmallFilesystem() {
    if (mounted_) ::umount2(dir_.c_str(), MNT_DETACH);
  }
  bool mounted() const { return mounted_; }
  const std::string& why() const { return why_; }
  // Writes `name` until the filesystem is full.
  void Fill(const std::string& name) const {
    std::ofstream out(dir_ / name, std::ios::binary);
    const std::string chunk(64 * 1024, '\0');
    while (out.write(chunk.data(), static_cast<std::streamsize>(chunk.size()))) {
    }
  }

 private:
  std::filesystem::path dir_;
  bool mounted_ = false;
  std::string why_;
};

bool Contains(const std::filesystem::path& file, const std::string& text) {
  return ReadFile(file).find(text) != std::string::npos;
}

// Waits (inotify) for a directory named `.tmp-ckpt_step*-PID` to be created in `dir` and
// returns PID, the process writing it; 0 after `timeout`.
pid_t WaitForTempDir(int inotify_fd, std::chrono::milliseconds timeout) {
  const auto end = std::chrono::steady_clock::now() + timeout;
  alignas(inotify_event) char buf[4096];
  while (std::chrono::steady_clock::now() < end) {
    pollfd p{inotify_fd, POLLIN, 0};
    if (::poll(&p, 1, 50) <= 0) continue;
    const ssize_t n = ::read(inotify_fd, buf, sizeof buf);
    for (ssize_t at = 0; at < n;) {
      const auto* ev = reinterpret_cast<const inotify_event*>(buf + at);
      at += static_cast<ssize_t>(sizeof(inotify_event) + ev->len);
      if (ev->len == 0 || (ev->mask & IN_ISDIR) == 0) continue;
      const std::string name = ev->name;
      if (name.rfind(".tmp-ckpt_step", 0) != 0) continue;
      const auto dash = name.rfind('-');
      return static_cast<pid_t>(std::stol(name.substr(dash + 1)));
    }
  }
  return 0;
}

// SIGKILL of spotvisor in the middle of a stop (SIGTERM sent, the trainer checkpointing
// inside its grace window): the trainer dies with it, and the next run resumes exactly.
TEST(Fault, SupervisorKilledDuringTheGraceWindow) {
  TempDir dir;
  const std::string expected = UninterruptedDigest(dir, "120");
  ASSERT_FALSE(expected.empty());
  WriteFile(dir / "job.yaml", TrainerJob(dir, {.step_sleep = "0.05", .extra = kQuickRestart}));
  auto sv = Spawn({SPOTVISOR_BINARY, "run", "--config", (dir / "job.yaml").string()}, dir / "out1.txt");
  pid_t trainer = 0;
  ASSERT_TRUE(WaitUntil(
      [&] {
        trainer = TrainerPid(ReadFile(dir / "out1.txt"), 1);
        return trainer != 0 && std::filesystem::exists(dir / "ckpt" / "ckpt_step20");
      },
      30s))
      << ReadFile(dir / "out1.txt");
  kill(sv.pid, SIGTERM);
  ASSERT_TRUE(WaitUntil([&] { return Contains(dir / "out1.txt", "event=signal_sent signal=SIGTERM"); }, 5s));
  kill(sv.pid, SIGKILL);
  EXPECT_EQ(WaitExit(sv.pid), 128 + SIGKILL);
  EXPECT_TRUE(WaitUntil([&] { return !ProcessAlive(trainer); }, 5s)) << "the trainer outlived its supervisor";

  auto again = Spawn({SPOTVISOR_BINARY, "run", "--config", (dir / "job.yaml").string()}, dir / "out2.txt");
  EXPECT_EQ(WaitExit(again.pid, 60s), 0) << ReadFile(dir / "out2.txt");
  EXPECT_TRUE(Contains(dir / "out2.txt", "[trainer] resumed from=")) << ReadFile(dir / "out2.txt");
  EXPECT_EQ(ReadFile(dir / "result"), expected) << ReadFile(dir / "out2.txt");
}

// SIGKILL of spotvisor while it waits out a restart backoff (no trainer runs): the next
// run starts one trainer, from the newest checkpoint, and ends exactly.
TEST(Fault, SupervisorKilledDuringBackoff) {
  TempDir dir;
  const std::string expected = UninterruptedDigest(dir, "120");
  ASSERT_FALSE(expected.empty());
  WriteFile(dir / "job.yaml",
            TrainerJob(dir, {.extra = "restart:\n  backoff: {initial: 30s, max: 30s, multiplier: 1, jitter: 0}\n"}));
  auto sv = Spawn({SPOTVISOR_BINARY, "run", "--config", (dir / "job.yaml").string()}, dir / "out1.txt");
  pid_t trainer = 0;
  ASSERT_TRUE(WaitUntil(
      [&] {
        trainer = TrainerPid(ReadFile(dir / "out1.txt"), 1);
        return trainer != 0 && std::filesystem::exists(dir / "ckpt" / "ckpt_step10");
      },
      30s))
      << ReadFile(dir / "out1.txt");
  kill(trainer, SIGKILL);  // a crash: spotvisor backs off 30 s before the restart
  ASSERT_TRUE(WaitUntil([&] { return Contains(dir / "out1.txt", "outcome=failed"); }, 10s))
      << ReadFile(dir / "out1.txt");
  kill(sv.pid, SIGKILL);
  EXPECT_EQ(WaitExit(sv.pid), 128 + SIGKILL);

  auto again = Spawn({SPOTVISOR_BINARY, "run", "--config", (dir / "job.yaml").string()}, dir / "out2.txt");
  EXPECT_EQ(WaitExit(again.pid, 60s), 0) << ReadFile(dir / "out2.txt");
  const std::string out = ReadFile(dir / "out2.txt");
  EXPECT_NE(TrainerPid(out, 2), 0) << "the attempt count goes on\n" << out;
  EXPECT_EQ(TrainerPid(out, 3), 0) << "one trainer, not two\n" << out;
  EXPECT_EQ(ReadFile(dir / "result"), expected) << out;
}

// The checkpoint filesystem fills up during a save: the half-written checkpoint is never
// resumed from, nor mirrored (the job mirrors to a directory off that disk); once there is
// room again the job ends exactly, and everything on the mirror validates.
TEST(Fault, CheckpointFilesystemFullDuringASave) {
  TempDir dir;
  SmallFilesystem fs(dir / "ckfs", "8m");
  if (!fs.mounted()) GTEST_SKIP() << fs.why();
  const std::string expected = UninterruptedDigest(dir, "120");
  ASSERT_FALSE(expected.empty());
  std::string job = TrainerJob(
      dir, {.step_sleep = "0.05",
            .extra = std::string(kQuickRestart) + "  crash_loop: {failures: 0, window: 10m}\n  max_restarts: 1000\n",
            .checkpoint_dir = (dir / "ckfs" / "ckpt").string()});
  const std::string pattern = "  pattern: \"ckpt_step{step}\"\n";
  job.insert(job.find(pattern) + pattern.size(), "  mirror:\n    path: " + (dir / "bucket").string() + "\n");
  WriteFile(dir / "job.yaml", job);
  auto sv = Spawn({SPOTVISOR_BINARY, "run", "--config", (dir / "job.yaml").string()}, dir / "out.txt");
  ASSERT_TRUE(WaitUntil([&] { return std::filesystem::exists(dir / "ckfs" / "ckpt" / "ckpt_step10"); }, 30s))
      << ReadFile(dir / "out.txt");
  fs.Fill("filler");  // before the save at step 20
  ASSERT_TRUE(WaitUntil([&] { return Contains(dir / "out.txt", "outcome=failed"); }, 30s)) << ReadFile(dir / "out.txt");
  EXPECT_FALSE(std::filesystem::exists(dir / "bucket" / "ckpt_step20"))
      << "the save that hit the full disk reached the mirror\n"
      << ReadFile(dir / "out.txt");
  std::filesystem::remove(dir / "ckfs" / "filler");
  EXPECT_EQ(WaitExit(sv.pid, 120s), 0) << ReadFile(dir / "out.txt");
  const std::string out = ReadFile(dir / "out.txt");
  EXPECT_NE(out.find("resume=" + (dir / "ckfs" / "ckpt" / "ckpt_step10").string() + " "), std::string::npos) << out;
  EXPECT_EQ(out.find("resume=" + (dir / "ckfs" / "ckpt" / "ckpt_step20").string() + " "), std::string::npos)
      << "the save that hit the full disk was resumed from\n"
      << out;
  EXPECT_EQ(ReadFile(dir / "result"), expected) << out;
  std::vector<std::string> mirrored;
  for (const auto& e : std::filesystem::directory_iterator(dir / "bucket")) {
    if (e.path().filename().string().rfind("ckpt_step", 0) == 0) mirrored.push_back(e.path().string());
  }
  ASSERT_FALSE(mirrored.empty()) << out;
  std::vector<std::string> validate = {"validate", "--level", "full"};
  validate.insert(validate.end(), mirrored.begin(), mirrored.end());
  std::string checked;
  EXPECT_EQ(testing::RunSpotvisor(validate, &checked), 0) << "a mirrored checkpoint does not validate\n" << checked;
}

// The state dir fills up: spotvisor says so once, keeps supervising (here through a crash
// and a restart), and says so again when it can write.
TEST(Fault, StateDirFullKeepsSupervisingAndRecovers) {
  TempDir dir;
  SmallFilesystem fs(dir / "st", "1m");
  if (!fs.mounted()) GTEST_SKIP() << fs.why();
  const std::string expected = UninterruptedDigest(dir, "120");
  ASSERT_FALSE(expected.empty());
  WriteFile(dir / "job.yaml",
            TrainerJob(dir, {.step_sleep = "0.05", .extra = kQuickRestart, .state_dir = (dir / "st").string()}));
  auto sv = Spawn({SPOTVISOR_BINARY, "run", "--config", (dir / "job.yaml").string()}, dir / "out.txt");
  pid_t trainer = 0;
  ASSERT_TRUE(WaitUntil(
      [&] {
        trainer = TrainerPid(ReadFile(dir / "out.txt"), 1);
        return trainer != 0 && std::filesystem::exists(dir / "ckpt" / "ckpt_step10");
      },
      30s))
      << ReadFile(dir / "out.txt");
  fs.Fill("filler");
  kill(trainer, SIGKILL);
  ASSERT_TRUE(WaitUntil([&] { return TrainerPid(ReadFile(dir / "out.txt"), 2) != 0; }, 30s))
      << ReadFile(dir / "out.txt");
  EXPECT_TRUE(Contains(dir / "out.txt", "event=state_write_failed")) << ReadFile(dir / "out.txt");
  std::filesystem::remove(dir / "st" / "filler");
  EXPECT_EQ(WaitExit(sv.pid, 60s), 0) << ReadFile(dir / "out.txt");
  const std::string out = ReadFile(dir / "out.txt");
  const std::size_t failed = Count(out, "event=state_write_failed");
  EXPECT_EQ(failed, 1u) << "once per change of condition\n" << out;
  EXPECT_NE(out.find("event=state_writable_again"), std::string::npos) << out;
  // The run record (run.json) says the same, once each way.
  EXPECT_EQ(Count(out, "event=run_record_write_failed"), 1u) << out;
  EXPECT_EQ(Count(out, "event=run_record_write_recovered"), 1u) << out;
  // Every attempt is in the journal, the one that ended while the disk was full included.
  const std::string attempts = ReadFile(dir / "st" / "attempts.jsonl");
  const std::size_t ended = Count(out, "event=attempt_ended");
  EXPECT_GE(ended, 2u) << out;
  EXPECT_EQ(Count(attempts, "\"attempt\":"), ended) << attempts << "\n" << out;
  for (std::size_t i = 1; i <= ended; ++i) {
    EXPECT_NE(attempts.find("\"attempt\":" + std::to_string(i) + ","), std::string::npos) << i << "\n" << attempts;
  }
  EXPECT_EQ(ReadFile(dir / "result"), expected) << out;
}

// SIGKILL of the trainer while it writes a checkpoint (its temp dir is left behind): the
// half-written one is never resumed from, the restarted trainer resumes from the newest
// complete one (and its helper cleans the leftover up), and the job ends exactly.
TEST(Fault, TrainerKilledWhileWritingACheckpoint) {
  TempDir dir;
  const std::string expected = UninterruptedDigest(dir, "120");
  ASSERT_FALSE(expected.empty());
  std::filesystem::create_directories(dir / "ckpt");
  const int fd = ::inotify_init1(IN_CLOEXEC | IN_NONBLOCK);
  ASSERT_GE(fd, 0);
  ASSERT_GE(::inotify_add_watch(fd, (dir / "ckpt").c_str(), IN_CREATE), 0);
  WriteFile(dir / "job.yaml",
            TrainerJob(dir, {.step_sleep = "0.01",
                             .extra = std::string(kQuickRestart) +
                                      "  crash_loop: {failures: 0, window: 10m}\n  no_progress_limit: 0\n"}));
  auto sv = Spawn({SPOTVISOR_BINARY, "run", "--config", (dir / "job.yaml").string()}, dir / "out.txt");
  int caught = 0;  // kills that left a temp dir
  for (int attempt = 1; attempt <= 3; ++attempt) {
    const pid_t writer = WaitForTempDir(fd, 30s);
    ASSERT_NE(writer, 0) << ReadFile(dir / "out.txt");
    // Only a trainer this supervisor started (its log names the pid) is killed.
    ASSERT_TRUE(WaitUntil([&] { return TrainerPid(ReadFile(dir / "out.txt"), attempt) == writer; }, 5s))
        << writer << "\n"
        << ReadFile(dir / "out.txt");
    kill(writer, SIGKILL);
    for (const auto& e : std::filesystem::directory_iterator(dir / "ckpt")) {
      if (e.path().filename().string().find("-" + std::to_string(writer)) != std::string::npos) ++caught;
    }
  }
  ::close(fd);
  EXPECT_EQ(WaitExit(sv.pid, 120s), 0) << ReadFile(dir / "out.txt");
  const std::string out = ReadFile(dir / "out.txt");
  EXPECT_GE(caught, 1) << "no kill landed inside a save\n" << out;
  EXPECT_GE(Count(out, "event=checkpoint_temp_left"), 1u) << "the leftover is reported before the restart\n" << out;
  EXPECT_EQ(Count(out, "resume=" + (dir / "ckpt").string() + "/.tmp"), 0u) << out;
  EXPECT_GE(Count(out, "outcome=failed"), 3u) << out;
  for (const auto& e : std::filesystem::directory_iterator(dir / "ckpt")) {
    EXPECT_NE(e.path().filename().string().rfind(".tmp-ckpt_step", 0), 0u) << "left behind: " << e.path();
  }
  EXPECT_EQ(ReadFile(dir / "result"), expected) << out;
}

// SIGKILL of spotvisor while it validates the checkpoint it is about to resume from (a
// large one, so the validation lasts): nothing is half-done (no quarantine, no trainer),
// and the next run validates it again and resumes exactly.
TEST(Fault, SupervisorKilledDuringValidation) {
  TempDir dir;
  const std::string expected = UninterruptedDigest(dir, "120");
  ASSERT_FALSE(expected.empty());
  WriteFile(dir / "job.yaml", TrainerJob(dir, {.step_sleep = "0.02"}));
  auto first = Spawn({SPOTVISOR_BINARY, "run", "--config", (dir / "job.yaml").string()}, dir / "out1.txt");
  ASSERT_TRUE(WaitUntil([&] { return std::filesystem::exists(dir / "ckpt" / "ckpt_step40"); }, 30s))
      << ReadFile(dir / "out1.txt");
  kill(first.pid, SIGTERM);
  ASSERT_EQ(WaitExit(first.pid), 75) << ReadFile(dir / "out1.txt");
  // The newest checkpoint grows a 2 GiB (sparse) file, sealed into its manifest, so that
  // validating every byte of it takes a while.
  std::filesystem::path newest;
  std::uint64_t newest_step = 0;
  for (const auto& e : std::filesystem::directory_iterator(dir / "ckpt")) {
    const std::string name = e.path().filename().string();
    if (name.rfind("ckpt_step", 0) != 0) continue;
    const auto step = std::stoull(name.substr(9));
    if (step >= newest_step) newest_step = step, newest = e.path();
  }
  ASSERT_FALSE(newest.empty());
  WriteFile(newest / "padding.dat", "");  // no known format: checked by the manifest
  std::filesystem::resize_file(newest / "padding.dat", 2ULL << 30);
  std::string seal_out;
  ASSERT_EQ(testing::RunSpotvisor({"seal", newest.string()}, &seal_out, 120s), 0) << seal_out;

  bool mid_validation = false;
  for (int round = 0; round < 3 && !mid_validation; ++round) {
    const auto out = dir / ("out2-" + std::to_string(round) + ".txt");
    auto sv = Spawn({SPOTVISOR_BINARY, "run", "--config", (dir / "job.yaml").string()}, out);
    ASSERT_TRUE(WaitUntil([&] { return Contains(out, "event=checkpoint_validating path=" + newest.string()); }, 30s))
        << ReadFile(out);
    kill(sv.pid, SIGKILL);
    EXPECT_EQ(WaitExit(sv.pid), 128 + SIGKILL);
    mid_validation = !Contains(out, "event=checkpoint_validated");
    EXPECT_FALSE(Contains(out, "event=trainer_started")) << ReadFile(out);
  }
  EXPECT_TRUE(mid_validation) << "every kill came after the validation had finished";
  EXPECT_FALSE(std::filesystem::exists(dir / "ckpt" / ".spotvisor-quarantine")) << "a good checkpoint was quarantined";
  EXPECT_TRUE(std::filesystem::exists(newest));

  auto again = Spawn({SPOTVISOR_BINARY, "run", "--config", (dir / "job.yaml").string()}, dir / "out3.txt");
  EXPECT_EQ(WaitExit(again.pid, 120s), 0) << ReadFile(dir / "out3.txt");
  const std::string out = ReadFile(dir / "out3.txt");
  EXPECT_NE(out.find("event=checkpoint_validated path=" + newest.string() + " step=" + std::to_string(newest_step) +
                     " verdict=good"),
            std::string::npos)
      << out;
  EXPECT_NE(out.find("resume=" + newest.string() + " "), std::string::npos) << out;
  EXPECT_EQ(ReadFile(dir / "result"), expected) << out;
}

// A trainer that closes its stdout and stderr and keeps running, with its output passed
// straight through and relayed line by line (health.progress_pattern): spotvisor keeps
// supervising until the real exit and reports that exit.
TEST(Fault, TrainerClosingItsOutputIsStillSupervised) {
  for (const bool relayed : {false, true}) {
    SCOPED_TRACE(relayed ? "relayed" : "passed through");
    TempDir dir;
    WriteFile(dir / "job.yaml",
              "job:\n  name: closer\n  command: [\"" + std::string(SPOTVISOR_CHILD_HELPER) +
                  "\", \"--mode=close-output\", \"--sleep-ms=1500\", \"--code=0\"]\n" +
                  (relayed ? "health:\n  progress_pattern: \"step=(\\\\d+)\"\n  hang_timeout: 1m\n" : ""));
    auto sv = Spawn({SPOTVISOR_BINARY, "run", "--config", (dir / "job.yaml").string()}, dir / "out.txt");
    EXPECT_EQ(WaitExit(sv.pid, 30s), 0) << ReadFile(dir / "out.txt");
    const std::string out = ReadFile(dir / "out.txt");
    EXPECT_NE(out.find("step=1 before closing stdout"), std::string::npos) << out;
    EXPECT_NE(out.find("closing stderr too"), std::string::npos) << out;
    EXPECT_EQ(Count(out, "event=trainer_started"), 1u) << out;
    EXPECT_NE(out.find("event=trainer_exited"), std::string::npos) << out;
    EXPECT_NE(out.find("event=exit code=0"), std::string::npos) << out;
  }
}

// A trainer that exits at once, a thousand times in a row: spotvisor's file descriptors
// and memory stay flat (the soak benchmark runs this for 3000 restarts).
TEST(Fault, InstantExitsKeepDescriptorsAndMemoryFlat) {
  TempDir dir;
  WriteFile(dir / "job.yaml",
            "job:\n  name: soak\n  command: [\"" + std::string(SPOTVISOR_CHILD_HELPER) +
                "\", \"--mode=exit\", \"--code=3\"]\n"
                "restart:\n  max_restarts: 100000\n  no_progress_limit: 0\n  crash_loop: {failures: 0, window: 10m}\n"
                "  backoff: {initial: 1ms, max: 1ms, multiplier: 1, jitter: 0}\n"
                "telemetry:\n  state_dir: ./state\n");
  auto sv = Spawn({SPOTVISOR_BINARY, "run", "--config", (dir / "job.yaml").string()}, dir / "out.txt");
  auto attempts = [&] { return testing::ReadLines(dir / "state" / "attempts.jsonl").size(); };
  auto fds = [&] {
    std::size_t n = 0;
    for ([[maybe_unused]] const auto& e :
         std::filesystem::directory_iterator("/proc/" + std::to_string(sv.pid) + "/fd"))
      ++n;
    return n;
  };
  auto rss_kib = [&] {
    std::ifstream in("/proc/" + std::to_string(sv.pid) + "/status");
    for (std::string line; std::getline(in, line);) {
      if (line.rfind("VmRSS:", 0) == 0) return std::stol(line.substr(6));
    }
    return 0L;
  };
  // A sample can land while a child is being started, with its pipes still open: the
  // fewest descriptors (and the least memory) over a few samples is the level a leak raises.
  auto lowest = [](auto sample) {
    auto low = sample();
    for (int i = 0; i < 20; ++i) {
      std::this_thread::sleep_for(5ms);
      low = std::min(low, sample());
    }
    return low;
  };
  ASSERT_TRUE(WaitUntil([&] { return attempts() >= 100 || !ProcessAlive(sv.pid); }, 60s));
  ASSERT_TRUE(ProcessAlive(sv.pid)) << ReadFile(dir / "out.txt");
  const auto fds_early = lowest(fds);
  const auto rss_early = lowest(rss_kib);
  ASSERT_TRUE(WaitUntil([&] { return attempts() >= 1000; }, 180s)) << attempts();
  const auto fds_late = lowest(fds);
  const auto rss_late = lowest(rss_kib);
  kill(sv.pid, SIGTERM);
  EXPECT_EQ(WaitExit(sv.pid), 75);
  EXPECT_LE(fds_late, fds_early + 1) << "descriptors: " << fds_early << " after 100 restarts, " << fds_late
                                     << " after 1000";
  // Old attempts are folded into totals, so 900 more restarts may cost allocator noise only.
  EXPECT_LT(rss_late - rss_early, 256) << "RSS KiB: " << rss_early << " -> " << rss_late;
}

}  // namespace
}  // namespace spotvisor

// The one checkpoint watcher and the one owner of checkpoints.dir, in process: each new
// checkpoint is read once whatever subscribes (rchar of this process and the watcher's
// validation log lines), a selection waits for work already on the keeper instead of
// racing it, and a selection does not read again what its own mirror restore validated.
#include <gtest/gtest.h>

#include <atomic>
#include <boost/asio/io_context.hpp>
#include <fstream>
#include <future>
#include <optional>
#include <random>
#include <thread>

#include "spotvisor/checkpoint_watch/checkpoint_watcher.hpp"
#include "spotvisor/checkpoint_watch/dir_keeper.hpp"
#include "spotvisor/config/loader.hpp"
#include "spotvisor/process/child_table.hpp"
#include "support/log_capture.hpp"
#include "support/test_support.hpp"

namespace spotvisor {
namespace {

using namespace std::chrono_literals;
using checkpoint_watch::CheckpointVerdict;
using checkpoint_watch::CheckpointWatcher;
using checkpoint_watch::DirKeeper;
using testing::TempDir;
using testing::WaitUntil;

constexpr std::size_t kMiB = 1 << 20;

config::JobConfig Job(const TempDir& dir, const std::string& extra) {
  const std::string yaml =
      "job:\n  name: w\n  command: [\"/bin/true\"]\n"
      "checkpoints:\n  dir: ./ckpt\n  pattern: \"ckpt_step{step}\"\n  format: any\n"
      "  validate: full\n" +
      extra + "telemetry:\n  state_dir: ./state\n";
  auto job = config::LoadJobText(yaml, dir / "job.yaml", dir.path());
  EXPECT_TRUE(job) << (job ? "" : job.error().message);
  EXPECT_TRUE(config::Finalize(*job, /*need_command=*/false));
  std::filesystem::create_directories(dir / "ckpt");
  return *job;
}

// Random bytes under a temp name, renamed into place: a complete checkpoint at once.
void WriteCheckpoint(const std::filesystem::path& path, std::size_t bytes) {
  std::string data(bytes, '\0');
  std::mt19937_64 random(bytes);
  for (auto& c : data) c = static_cast<char>(random());
  const auto tmp = path.parent_path() / (".tmp-" + path.filename().string());
  std::ofstream(tmp, std::ios::binary) << data;
  std::filesystem::rename(tmp, path);
}

std::uint64_t Rchar() {
  std::ifstream io("/proc/self/io");
  std::string key;
  std::uint64_t value = 0;
  while (io >> key >> value) {
    if (key == "rchar:") return value;
  }
  return 0;
}

class Control final : public supervisor::RunControl {
 public:
  explicit Control(const config::JobConfig& job) : job_(job) {}
  boost::asio::io_context& io() override { return io_; }
  Clock& clock() override { return SystemClock(); }               // real files, real time
  process::ChildTable& children() override { return children_; }  // the watcher starts none
  const config::JobConfig& job() const override { return job_; }
  void RequestStop(supervisor::StopReason, const std::string&) override {}
  void RequestCheckpoint(const std::string&) override {}
  pid_t child_pid() const override { return 0; }
  // Runs the loop until `done`, at most `timeout`.
  bool RunUntil(const std::function<bool()>& done, std::chrono::milliseconds timeout = 10s) {
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    while (!done()) {
      if (std::chrono::steady_clock::now() > deadline) return false;
      io_.run_for(10ms);
    }
    return true;
  }

 private:
  const config::JobConfig& job_;
  boost::asio::io_context io_;
  process::ChildTable children_;
};

TEST(OneCheckpointWatcher, EachNewCheckpointIsReadOnceForEverySubscriber) {
  TempDir dir;
  const auto job = Job(dir, "  keep: 2\n");
  testing::LogCapture logs;
  Control control(job);
  auto keeper = std::make_shared<DirKeeper>(job, SystemClock());
  CheckpointWatcher watcher(keeper, control.clock(), {200ms, 20ms});
  // Three subscribers, as telemetry, cadence and the mirror are.
  std::vector<std::vector<std::string>> got(3);
  for (auto& names : got) {
    watcher.Subscribe([&names](const std::vector<CheckpointVerdict>& verdicts) {
      for (const auto& v : verdicts) {
        EXPECT_TRUE(v.good) << v.name << ": " << v.reason;
        EXPECT_EQ(v.shape.bytes, 2 * kMiB) << v.name;
        names.push_back(v.name);
      }
    });
  }
  watcher.OnStart(control);
  keeper->Call([] {});  // the baseline scan is done: what comes next is news
  watcher.Hurry(true);
  const auto before = Rchar();
  for (int step = 1; step <= 3; ++step) {
    WriteCheckpoint(dir / "ckpt" / ("ckpt_step" + std::to_string(step)), 2 * kMiB);
    ASSERT_TRUE(control.RunUntil([&] { return got[2].size() == static_cast<std::size_t>(step); })) << logs.Joined();
  }
  const auto read = Rchar() - before;
  watcher.OnExit(0, "done");
  const std::vector<std::string> expected{"ckpt_step1", "ckpt_step2", "ckpt_step3"};
  for (const auto& names : got) EXPECT_EQ(names, expected);
  // One validation each: 6 MiB read, not 12 (two scanners) or more.
  EXPECT_GE(read, 6 * kMiB);
  EXPECT_LT(read, 6 * kMiB + kMiB) << read;
  for (const auto& name : expected) {
    EXPECT_EQ(logs.Count("event=checkpoint_validated path=" + (dir / "ckpt" / name).string() + " "), 1)
        << logs.Joined();
  }
  // checkpoints.keep: 2, applied on the keeper after each new good checkpoint.
  EXPECT_FALSE(std::filesystem::exists(dir / "ckpt" / "ckpt_step1"));
  EXPECT_TRUE(std::filesystem::exists(dir / "ckpt" / "ckpt_step3"));
}

// A checkpoint still changing is not judged; one that stays bad is told once it held still.
TEST(OneCheckpointWatcher, ABadCheckpointIsToldOnceItHeldStill) {
  TempDir dir;
  const auto job = Job(dir, "");
  Control control(job);
  auto keeper = std::make_shared<DirKeeper>(job, SystemClock());
  CheckpointWatcher watcher(keeper, control.clock(), {100ms, 20ms});
  std::vector<CheckpointVerdict> got;
  watcher.Subscribe(
      [&](const std::vector<CheckpointVerdict>& verdicts) { got.insert(got.end(), verdicts.begin(), verdicts.end()); });
  watcher.OnStart(control);
  keeper->Call([] {});                                  // the baseline scan is done: what comes next is news
  testing::WriteFile(dir / "ckpt" / "ckpt_step7", "");  // empty: bad
  ASSERT_TRUE(control.RunUntil([&] { return !got.empty(); }));
  ASSERT_EQ(got.size(), 1u);
  EXPECT_EQ(got[0].name, "ckpt_step7");
  EXPECT_FALSE(got[0].good);
  EXPECT_NE(got[0].reason.find("empty"), std::string::npos) << got[0].reason;
  watcher.OnExit(0, "done");
}

// Retention and the watcher's judging (posted to the keeper) and a selection (quarantine,
// retention) never run at once: a selection asked for while the keeper is busy waits.
TEST(OneCheckpointWatcher, ASelectionWaitsForWorkAlreadyOnTheKeeper) {
  TempDir dir;
  const auto job = Job(dir, "  keep: 1\n  quarantine: true\n");
  WriteCheckpoint(dir / "ckpt" / "ckpt_step1", 4096);
  WriteCheckpoint(dir / "ckpt" / "ckpt_step2", 4096);
  testing::WriteFile(dir / "ckpt" / "ckpt_step3", "");  // bad: quarantined by the selection
  auto keeper = std::make_shared<DirKeeper>(job, SystemClock());
  auto selector = checkpoint_watch::MakeKeptSelector(keeper);
  std::promise<void> busy, release;
  bool bad_there_at_the_end = false;
  keeper->Post([&, release_future = release.get_future().share()] {
    busy.set_value();
    release_future.wait();
    bad_there_at_the_end = std::filesystem::exists(dir / "ckpt" / "ckpt_step3");
  });
  busy.get_future().wait();
  std::atomic<bool> selected{false};
  std::optional<Result<checkpoint::Selection>> selection;
  std::thread selecting([&] {
    selection.emplace(selector->SelectForResume());
    selected = true;
  });
  // While the keeper is busy nothing of the selection happens.
  EXPECT_FALSE(
      WaitUntil([&] { return selected.load() || !std::filesystem::exists(dir / "ckpt" / "ckpt_step3"); }, 300ms));
  release.set_value();
  selecting.join();
  EXPECT_TRUE(bad_there_at_the_end);
  ASSERT_TRUE(selection.has_value());
  ASSERT_TRUE(*selection) << selection->error().message;
  ASSERT_TRUE((*selection)->chosen);
  EXPECT_EQ((*selection)->chosen->step, 2u);
  ASSERT_EQ((*selection)->rejected.size(), 1u);
  EXPECT_TRUE((*selection)->rejected[0].moved_to);
  EXPECT_FALSE(std::filesystem::exists(dir / "ckpt" / "ckpt_step3"));
  EXPECT_FALSE(std::filesystem::exists(dir / "ckpt" / "ckpt_step1"));  // keep: 1
}

// A mirror restore asks for the newest good local checkpoint first; the selection right
// after does not read it again. The next selection (a later start) does.
TEST(OneCheckpointWatcher, ASelectionTrustsWhatItsOwnRestoreValidated) {
  TempDir dir;
  const auto job = Job(dir, "");
  WriteCheckpoint(dir / "ckpt" / "ckpt_step4", 4 * kMiB);
  testing::LogCapture logs;
  auto keeper = std::make_shared<DirKeeper>(job, SystemClock());
  auto selector = checkpoint_watch::MakeKeptSelector(keeper);
  auto before = Rchar();
  const auto local = keeper->Call([&] { return keeper->NewestGood(/*for_selection=*/true); });
  ASSERT_TRUE(local);
  EXPECT_EQ(local->step, 4u);
  EXPECT_GE(Rchar() - before, 4 * kMiB);
  before = Rchar();
  auto first = selector->SelectForResume();
  ASSERT_TRUE(first && first->chosen) << logs.Joined();
  EXPECT_LT(Rchar() - before, kMiB) << "the selection read the checkpoint its restore had just validated";
  EXPECT_EQ(logs.Count("validated_by=\"this selection's mirror restore\""), 1) << logs.Joined();
  before = Rchar();
  auto second = selector->SelectForResume();
  ASSERT_TRUE(second && second->chosen);
  EXPECT_GE(Rchar() - before, 4 * kMiB) << "a later selection validates at resume time again";
}

}  // namespace
}  // namespace spotvisor

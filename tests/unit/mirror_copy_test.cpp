// The mirror's building blocks: the token bucket (in virtual time, no sleeps), the verified
// atomic tree copy, and the blocking command runner the command mirror uses (through a
// child table).
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <boost/asio/io_context.hpp>
#include <stop_token>

#include "spotvisor/mirror/rate_limiter.hpp"
#include "spotvisor/mirror/tree_copy.hpp"
#include "spotvisor/process/blocking_command.hpp"
#include "spotvisor/process/child_table.hpp"
#include "support/test_support.hpp"
#include "support/virtual_clock.hpp"

namespace spotvisor::mirror {
namespace {

using namespace std::chrono_literals;
using testing::ReadFile;
using testing::TempDir;

void WriteFile(const std::filesystem::path& path, const std::string& text) {
  std::filesystem::create_directories(path.parent_path());
  testing::WriteFile(path, text);
}

TEST(RateLimiter, UnlimitedNeverWaits) {
  testing::VirtualClock clock;
  RateLimiter r(clock, 0);
  EXPECT_EQ(r.Reserve(1ull << 40, clock.Now()), Duration::zero());
}

TEST(RateLimiter, OneSecondBurstThenTheRate) {
  testing::VirtualClock clock;
  RateLimiter r(clock, 1000);
  const auto t0 = clock.Now() + 1h;  // well after construction: the bucket is full
  EXPECT_EQ(r.Reserve(1000, t0), Duration::zero());
  EXPECT_EQ(r.Reserve(500, t0), 500ms);
  // Half a second later the debt is paid; another 500 bytes cost another half second.
  EXPECT_EQ(r.Reserve(500, t0 + 500ms), 500ms);
  // Long idle refills at most one second's worth.
  EXPECT_EQ(r.Reserve(1000, t0 + 1h), Duration::zero());
}

TEST(RateLimiter, AcquireSleepsOnItsClock) {
  testing::VirtualClock clock;
  RateLimiter r(clock, 1000);
  r.Acquire(1000);  // the full bucket
  EXPECT_EQ(clock.elapsed(), 0ms);
  r.Acquire(2500);  // 2.5 s of debt, paid by sleeping on the clock
  EXPECT_EQ(clock.elapsed(), 2500ms);
  r.Acquire(1);  // the bucket refilled by the sleep is empty again: 1 ms for one byte
  EXPECT_EQ(clock.elapsed(), 2501ms);
}

TEST(TreeCopy, CopiesATreeVerifiedAndReplacesAnOldCopyAtomically) {
  TempDir dir;
  WriteFile(dir / "src" / "ck" / "a.bin", std::string(3 << 20, 'x'));
  WriteFile(dir / "src" / "ck" / "sub" / "b.txt", "hello\n");
  auto stats = CopyVerified(dir / "src" / "ck", dir / "mirror", "ck", {});
  ASSERT_TRUE(stats.ok()) << stats.error().message;
  EXPECT_EQ(stats->files, 2u);
  EXPECT_EQ(stats->bytes, (3u << 20) + 6u);
  EXPECT_EQ(ReadFile(dir / "mirror" / "ck" / "sub" / "b.txt"), "hello\n");
  EXPECT_EQ(*TreeBytes(dir / "mirror" / "ck"), stats->bytes);
  // A second copy replaces the first; nothing is left under a temp name.
  WriteFile(dir / "src" / "ck" / "sub" / "b.txt", "changed\n");
  ASSERT_TRUE(CopyVerified(dir / "src" / "ck", dir / "mirror", "ck", {}).ok());
  EXPECT_EQ(ReadFile(dir / "mirror" / "ck" / "sub" / "b.txt"), "changed\n");
  int entries = 0;
  for ([[maybe_unused]] const auto& e : std::filesystem::directory_iterator(dir / "mirror")) ++entries;
  EXPECT_EQ(entries, 1);
}

TEST(TreeCopy, ASingleFileCheckpoint) {
  TempDir dir;
  WriteFile(dir / "step_5.pt", "payload");
  ASSERT_TRUE(CopyVerified(dir / "step_5.pt", dir / "m", "step_5.pt", {}).ok());
  EXPECT_EQ(ReadFile(dir / "m" / "step_5.pt"), "payload");
}

TEST(TreeCopy, CancelLeavesNothingBehind) {
  TempDir dir;
  WriteFile(dir / "ck" / "a.bin", std::string(4 << 20, 'y'));
  CopyControl control;
  std::stop_source cancel;
  cancel.request_stop();
  control.stop = cancel.get_token();
  auto r = CopyVerified(dir / "ck", dir / "m", "ck", control);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.error().message.find("cancelled"), std::string::npos);
  EXPECT_TRUE(std::filesystem::is_empty(dir / "m"));
}

TEST(TreeCopy, AFullTargetFailsCleanly) {
  if (geteuid() != 0) GTEST_SKIP() << "needs root for a tmpfs";
  TempDir dir;
  std::filesystem::create_directories(dir / "small");
  if (std::system(("mount -t tmpfs -o size=1m tmpfs " + (dir / "small").string()).c_str()) != 0) {
    GTEST_SKIP() << "cannot mount a tmpfs here";
  }
  WriteFile(dir / "ck" / "a.bin", std::string(3 << 20, 'z'));
  auto r = CopyVerified(dir / "ck", dir / "small", "ck", {});
  EXPECT_FALSE(r.ok());
  EXPECT_TRUE(std::filesystem::is_empty(dir / "small"));
  std::system(("umount " + (dir / "small").string()).c_str());
}

// No io thread runs here: the waiting thread reaps through the table itself.
TEST(CommandRunner, ExitCodesSignalsAndTimeouts) {
  TempDir dir;
  boost::asio::io_context io;
  process::ChildTable children;
  using process::CommandEnd;
  const auto run = [&](std::vector<std::string> argv, std::chrono::milliseconds timeout, std::stop_token stop = {}) {
    return process::RunCommand(children, {.argv = std::move(argv), .workdir = dir.path(), .timeout = timeout},
                               std::move(stop));
  };
  auto ok = run({"true"}, 10s);
  ASSERT_NE(ok.end, CommandEnd::kSpawnFailed) << ok.error;
  EXPECT_TRUE(ok.ok());
  auto fail = run({"sh", "-c", "exit 7"}, 10s);
  ASSERT_NE(fail.end, CommandEnd::kSpawnFailed);
  EXPECT_EQ(fail.exit_code, 7);
  auto killed = run({"sh", "-c", "kill -9 $$"}, 10s);
  ASSERT_NE(killed.end, CommandEnd::kSpawnFailed);
  EXPECT_EQ(killed.signal, 9);
  const auto start = std::chrono::steady_clock::now();
  auto slow = run({"sleep", "30"}, 300ms);
  ASSERT_NE(slow.end, CommandEnd::kSpawnFailed);
  EXPECT_EQ(slow.end, CommandEnd::kTimedOut);
  EXPECT_LT(std::chrono::steady_clock::now() - start, 10s);
  std::stop_source cancel;
  cancel.request_stop();
  auto cancelled = run({"sleep", "30"}, 60s, cancel.get_token());
  ASSERT_NE(cancelled.end, CommandEnd::kSpawnFailed);
  EXPECT_EQ(cancelled.end, CommandEnd::kCancelled);  // killed (SIGKILL to its group) on cancel
  EXPECT_EQ(run({"/nonexistent/program"}, 1s).end, CommandEnd::kSpawnFailed);
  auto cwd = run({"sh", "-c", "pwd > out.txt"}, 10s);
  ASSERT_NE(cwd.end, CommandEnd::kSpawnFailed);
  EXPECT_EQ(ReadFile(dir / "out.txt"), dir.path().string() + "\n");
}

}  // namespace
}  // namespace spotvisor::mirror

// The trigger-file watcher and the shared notice book: appearance is one notice (however
// many polls see it), optional JSON content sets deadline/kind/action, removal clears, a
// rewritten file is a new notice.
#include <gtest/gtest.h>

#include <boost/asio/io_context.hpp>

#include "spotvisor/preemption/time_format.hpp"
#include "spotvisor/preemption/watcher.hpp"
#include "support/test_support.hpp"

namespace spotvisor::preemption {
namespace {

using namespace std::chrono_literals;

// Runs the loop until `done` or two seconds.
bool Drive(boost::asio::io_context& io, const std::function<bool()>& done) {
  const auto deadline = std::chrono::steady_clock::now() + 2s;
  while (!done() && std::chrono::steady_clock::now() < deadline) {
    io.restart();
    io.run_for(2ms);
  }
  return done();
}

TEST(FileWatcherTest, AppearanceContentRemoval) {
  boost::asio::io_context io;
  testing::TempDir dir;
  config::ProviderSection p;
  p.kind = config::ProviderKind::kFile;
  p.file = dir / "preempt";
  p.poll_interval = 5ms;
  p.default_window = 30s;
  auto watcher = MakeWatcher(io, SystemClock(), p);
  ASSERT_TRUE(watcher.ok()) << watcher.error().message;
  std::vector<Notice> notices;
  int cleared = 0;
  (*watcher)->Start([&](const Notice& n) { notices.push_back(n); }, [&] { ++cleared; });
  io.run_for(50ms);  // several polls of a missing file
  EXPECT_TRUE(notices.empty());
  EXPECT_EQ(cleared, 0);

  testing::WriteFile(p.file, "");
  ASSERT_TRUE(Drive(io, [&] { return !notices.empty(); }));
  EXPECT_EQ(notices[0].provider, "file");
  EXPECT_EQ(notices[0].kind, "file");
  EXPECT_EQ(notices[0].action, NoticeAction::kStop);
  ASSERT_TRUE(notices[0].deadline.has_value());
  EXPECT_GT(*notices[0].deadline - std::chrono::system_clock::now(), 25s);
  io.restart();
  io.run_for(50ms);
  EXPECT_EQ(notices.size(), 1u);

  std::filesystem::remove(p.file);
  ASSERT_TRUE(Drive(io, [&] { return cleared == 1; }));

  testing::WriteFile(p.file, R"({"deadline": "2030-01-01T00:00:00Z", "kind": "slurm"})");
  ASSERT_TRUE(Drive(io, [&] { return notices.size() == 2; }));
  EXPECT_EQ(notices[1].kind, "slurm");
  EXPECT_EQ(FormatIso8601(*notices[1].deadline), "2030-01-01T00:00:00Z");
  (*watcher)->Stop();
}

TEST(FileWatcherTest, CheckpointRequestsAndGarbageContent) {
  boost::asio::io_context io;
  testing::TempDir dir;
  config::ProviderSection p;
  p.kind = config::ProviderKind::kFile;
  p.file = dir / "notice.json";
  p.poll_interval = 5ms;
  auto watcher = MakeWatcher(io, SystemClock(), p);
  ASSERT_TRUE(watcher.ok());
  std::vector<Notice> notices;
  (*watcher)->Start([&](const Notice& n) { notices.push_back(n); }, [] {});
  testing::WriteFile(p.file, R"({"action": "checkpoint"})");
  ASSERT_TRUE(Drive(io, [&] { return !notices.empty(); }));
  EXPECT_EQ(notices[0].action, NoticeAction::kCheckpoint);
  io.restart();
  io.run_for(50ms);
  EXPECT_EQ(notices.size(), 1u);  // the same file is one request, even though it stays
  std::filesystem::remove(p.file);
  io.restart();
  io.run_for(20ms);
  testing::WriteFile(p.file, "garbage that is not JSON");
  ASSERT_TRUE(Drive(io, [&] { return notices.size() == 2; }));
  EXPECT_EQ(notices[1].action, NoticeAction::kStop);  // the appearance is what counts
  EXPECT_EQ(notices[1].detail, "garbage that is not JSON");
}

}  // namespace
}  // namespace spotvisor::preemption

// The trigger-file watcher in virtual time (support/virtual_clock.hpp): a file is seen at the
// first poll after it appears and its removal at the first poll after that, to the
// millisecond; a notice without a deadline gets the clock's wall time plus the warning
// window. The file is real, the waiting is not: a day of polls takes milliseconds.
#include <gtest/gtest.h>

#include <boost/asio/io_context.hpp>
#include <filesystem>
#include <vector>

#include "spotvisor/preemption/watcher.hpp"
#include "support/test_support.hpp"
#include "support/virtual_clock.hpp"

namespace spotvisor::preemption {
namespace {

using namespace std::chrono_literals;
using testing::VirtualClock;

const WallTime kWallStart{std::chrono::seconds(1'800'000'000)};

TEST(FileWatcherClock, SeenAndClearedAtThePollAfterTheChangeInVirtualTime) {
  boost::asio::io_context io;
  VirtualClock clock(kWallStart);
  testing::TempDir dir;
  config::ProviderSection p;
  p.kind = config::ProviderKind::kFile;
  p.file = dir / "preempt";
  p.poll_interval = 2s;
  p.default_window = 30s;
  auto watcher = MakeWatcher(io, clock, p);
  ASSERT_TRUE(watcher.ok()) << watcher.error().message;
  std::vector<std::pair<Duration, Notice>> notices;  // virtual time seen, notice
  std::vector<Duration> cleared;
  (*watcher)->Start([&](const Notice& n) { notices.emplace_back(clock.elapsed(), n); },
                    [&] { cleared.push_back(clock.elapsed()); });

  clock.RunFor(io, 5500ms);  // polls at 0, 2 and 4 s: no file
  EXPECT_TRUE(notices.empty());
  testing::WriteFile(p.file, "");
  clock.RunFor(io, 10s);  // polls at 6 .. 14 s
  ASSERT_EQ(notices.size(), 1u);
  EXPECT_EQ(notices[0].first, 6s);
  ASSERT_TRUE(notices[0].second.deadline.has_value());
  EXPECT_TRUE(*notices[0].second.deadline == kWallStart + 6s + 30s);  // the clock's wall time, not the machine's

  std::filesystem::remove(p.file);  // at 15.5 s
  clock.RunFor(io, 1s);
  EXPECT_EQ(cleared, std::vector<Duration>{16s});

  clock.RunFor(io, 24h);  // 43200 polls of a missing file
  EXPECT_EQ(notices.size(), 1u);
  EXPECT_EQ(cleared.size(), 1u);
  EXPECT_EQ(clock.elapsed(), 16500ms + 24h);
  (*watcher)->Stop();
  EXPECT_EQ(clock.pending_timers(), 0u);
}

}  // namespace
}  // namespace spotvisor::preemption

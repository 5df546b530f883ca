// The grace a notice leaves the trainer: the window less the safety margin, never under
// min_grace (a deadline already past still gets a save attempt), the default window when
// the notice has no deadline.
#include <gtest/gtest.h>

#include "spotvisor/supervisor/notice_grace.hpp"

namespace spotvisor::supervisor {
namespace {

using std::chrono::milliseconds;
using std::chrono::seconds;

config::ProviderSection Provider() {
  config::ProviderSection p;
  p.safety_margin = seconds(5);
  p.min_grace = seconds(8);
  p.default_window = seconds(30);
  return p;
}

TEST(NoticeGrace, TheWindowLessTheSafetyMargin) {
  const auto g = GraceForNotice(milliseconds(120'000), Provider());
  EXPECT_EQ(g.window, milliseconds(120'000));
  EXPECT_EQ(g.cap, milliseconds(115'000));
  EXPECT_FALSE(g.deadline_near);
}

TEST(NoticeGrace, NoDeadlineUsesTheDefaultWindow) {
  const auto g = GraceForNotice(std::nullopt, Provider());
  EXPECT_EQ(g.window, milliseconds(30'000));
  EXPECT_EQ(g.cap, milliseconds(25'000));
}

TEST(NoticeGrace, ANearOrPastDeadlineStillLeavesMinGrace) {
  for (const auto until : {milliseconds(12'999), milliseconds(0), milliseconds(-60'000)}) {
    const auto g = GraceForNotice(until, Provider());
    EXPECT_EQ(g.cap, milliseconds(8'000)) << until.count();
    EXPECT_TRUE(g.deadline_near) << until.count();
  }
  EXPECT_FALSE(GraceForNotice(milliseconds(13'000), Provider()).deadline_near);  // exactly min_grace left
}

}  // namespace
}  // namespace spotvisor::supervisor

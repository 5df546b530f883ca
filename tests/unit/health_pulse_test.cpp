// The pulse rule: a heartbeat older than the trainer's start is no pulse; the hang clock
// starts at the start; the next look is due when the timeout would run out.
#include <gtest/gtest.h>

#include "spotvisor/health/pulse.hpp"

namespace spotvisor::health {
namespace {

using namespace std::chrono_literals;

const WallTime kStart = WallTime(std::chrono::seconds(1'700'000'000));

TEST(Pulse, NoFileYetCountsFromTheStart) {
  auto v = JudgePulse(kStart, std::nullopt, kStart + 3s, 10s);
  EXPECT_FALSE(v.hung);
  EXPECT_EQ(v.silent, 3s);
  EXPECT_EQ(v.check_in, 7s);
  EXPECT_TRUE(JudgePulse(kStart, std::nullopt, kStart + 10s, 10s).hung);
}

TEST(Pulse, AHeartbeatFromBeforeTheStartIsNoPulse) {
  const auto v = JudgePulse(kStart, kStart - 1s, kStart + 10s, 10s);
  EXPECT_TRUE(v.hung);
  EXPECT_EQ(v.silent, 10s);
}

TEST(Pulse, AFreshBeatResetsTheClock) {
  auto v = JudgePulse(kStart, kStart + 8s, kStart + 12s, 10s);
  EXPECT_FALSE(v.hung);
  EXPECT_EQ(v.silent, 4s);
  EXPECT_EQ(v.check_in, 6s);
  EXPECT_TRUE(JudgePulse(kStart, kStart + 8s, kStart + 18s, 10s).hung);
}

TEST(Pulse, ABeatFromTheFutureNeverPostponesBeyondOneTimeout) {
  const auto v = JudgePulse(kStart, kStart + 1h, kStart + 5s, 10s);
  EXPECT_FALSE(v.hung);
  EXPECT_EQ(v.silent, 0s);
  EXPECT_EQ(v.check_in, 10s);
}

}  // namespace
}  // namespace spotvisor::health

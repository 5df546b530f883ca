// The leftover kill ladder, table-driven: each row is (is the group gone, ms since the
// start) and the move that must come out. Time is a plain argument; nothing sleeps.
#include <gtest/gtest.h>

#include <csignal>

#include "spotvisor/supervisor/stop_ladder.hpp"

namespace spotvisor::supervisor {
namespace {

using std::chrono::milliseconds;
using Move = StopLadder::Move;

struct Row {
  bool gone;
  long at_ms;
  Move move;
  int signo;
  long until_ms;  // for kSignal and kWait: when the current rung's wait ends
};

void Play(StopLadder& ladder, const std::vector<Row>& rows) {
  const auto t0 = StopLadder::TimePoint{} + std::chrono::seconds(100);
  for (std::size_t i = 0; i < rows.size(); ++i) {
    const auto step = ladder.Next(rows[i].gone, t0 + milliseconds(rows[i].at_ms));
    EXPECT_EQ(step.move, rows[i].move) << "row " << i;
    EXPECT_EQ(step.signo, rows[i].signo) << "row " << i;
    if (step.move == Move::kSignal || step.move == Move::kWait) {
      EXPECT_EQ(step.until, t0 + milliseconds(rows[i].until_ms)) << "row " << i;
    }
  }
}

TEST(StopLadder, TheLeftoverLadderIsTheStopSignalWithACappedGraceThenSigkill) {
  const auto rungs = LeftoverLadder(SIGINT, std::chrono::seconds(90), std::chrono::seconds(7));
  ASSERT_EQ(rungs.size(), 2u);
  EXPECT_EQ(rungs[0].signo, SIGINT);
  EXPECT_EQ(rungs[0].wait, std::chrono::seconds(10));  // orphaned a while already: at most 10 s
  EXPECT_EQ(rungs[1].signo, SIGKILL);
  EXPECT_EQ(rungs[1].wait, std::chrono::seconds(7));
  EXPECT_EQ(LeftoverLadder(SIGTERM, std::chrono::seconds(3), std::chrono::seconds(7))[0].wait, std::chrono::seconds(3));
}

TEST(StopLadder, AGroupGoneBeforeTheFirstRungNeedsNoSignal) {
  StopLadder ladder(LeftoverLadder(SIGTERM, std::chrono::seconds(2), std::chrono::seconds(5)));
  Play(ladder, {{true, 0, Move::kStopped, 0, 0}});
}

TEST(StopLadder, AGroupThatHeedsTheStopSignalNeverSeesSigkill) {
  StopLadder ladder(LeftoverLadder(SIGTERM, std::chrono::seconds(2), std::chrono::seconds(5)));
  Play(ladder, {{false, 0, Move::kSignal, SIGTERM, 2000},
                {false, 5, Move::kWait, SIGTERM, 2000},
                {false, 1999, Move::kWait, SIGTERM, 2000},
                {true, 2000, Move::kStopped, SIGTERM, 0}});
}

TEST(StopLadder, SigkillAfterTheFirstRungsWait) {
  StopLadder ladder(LeftoverLadder(SIGTERM, std::chrono::seconds(2), std::chrono::seconds(5)));
  Play(ladder, {{false, 0, Move::kSignal, SIGTERM, 2000},
                {false, 2000, Move::kSignal, SIGKILL, 7000},
                {false, 3000, Move::kWait, SIGKILL, 7000},
                {true, 3005, Move::kStopped, SIGKILL, 0}});
}

TEST(StopLadder, AGroupThatOutlivesSigkillIsGivenUpOnceItsWaitIsOver) {
  StopLadder ladder(LeftoverLadder(SIGTERM, std::chrono::seconds(2), std::chrono::seconds(5)));
  Play(ladder, {{false, 0, Move::kSignal, SIGTERM, 2000},
                {false, 2500, Move::kSignal, SIGKILL, 7500},  // late poll: the wait counts from the signal
                {false, 7499, Move::kWait, SIGKILL, 7500},
                {false, 7500, Move::kGiveUp, SIGKILL, 0},
                {false, 9000, Move::kGiveUp, SIGKILL, 0},    // and stays given up
                {true, 9500, Move::kStopped, SIGKILL, 0}});  // unless it went after all
}

TEST(StopLadder, ZeroWaitsStillSendEveryRungOnce) {
  StopLadder ladder({{SIGTERM, milliseconds(0)}, {SIGKILL, milliseconds(0)}});
  Play(ladder, {{false, 0, Move::kSignal, SIGTERM, 0},
                {false, 0, Move::kSignal, SIGKILL, 0},
                {false, 0, Move::kGiveUp, SIGKILL, 0}});
}

}  // namespace
}  // namespace spotvisor::supervisor

// The core's words for outcomes (what the journal stores) read back, and the exit codes
// users' scripts rely on (MISSION.md) keep their numbers.
#include <gtest/gtest.h>

#include "spotvisor/cli/app.hpp"
#include "spotvisor/supervisor/outcome.hpp"

namespace spotvisor::supervisor {
namespace {

TEST(Outcome, EveryWordReadsBack) {
  for (Outcome o : {Outcome::kDone, Outcome::kFailed, Outcome::kStopped, Outcome::kPreempted, Outcome::kHang,
                    Outcome::kBudget, Outcome::kSpawnFailed}) {
    EXPECT_EQ(ParseOutcome(ToString(o)), o) << ToString(o);
  }
  EXPECT_EQ(ToString(Outcome::kSpawnFailed), "spawn-failed");
  EXPECT_FALSE(ParseOutcome("running"));
}

TEST(Outcome, ExitCodesKeepTheirNumbers) {
  EXPECT_EQ(Code(ExitCode::kDone), 0);
  EXPECT_EQ(Code(ExitCode::kFailed), 1);
  EXPECT_EQ(Code(ExitCode::kBudget), 3);
  EXPECT_EQ(Code(ExitCode::kUsage), 64);
  EXPECT_EQ(Code(ExitCode::kLocked), 73);
  EXPECT_EQ(Code(ExitCode::kStopped), 75);
  EXPECT_EQ(Code(ExitCode::kConfig), 78);
  EXPECT_EQ(cli::exit_code::kStopped, 75);  // the CLI takes them from the core
}

}  // namespace
}  // namespace spotvisor::supervisor

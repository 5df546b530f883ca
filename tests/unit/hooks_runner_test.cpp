// Hooks as real processes: exit codes, output relayed, a hang killed at its timeout, a
// missing program, and the supervisor's reaping (the child table's Reap, from any thread)
// never stealing a hook's status.
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <boost/asio/io_context.hpp>
#include <thread>

#include "spotvisor/hooks/hook_runner.hpp"
#include "spotvisor/process/child_table.hpp"
#include "support/test_support.hpp"

namespace spotvisor::hooks {
namespace {

using namespace std::chrono_literals;

HookResult RunOne(const std::vector<std::string>& argv, Duration timeout, std::map<std::string, std::string> env = {}) {
  boost::asio::io_context io;
  process::ChildTable table;
  HookRunner runner(io, table, "/", {{"FROM_RUNNER", "r"}});
  HookResult out;
  runner.Run("on_finish", argv, timeout, env, [&](const HookResult& r) { out = r; });
  io.run();
  return out;
}

TEST(HookRunner, ExitCodesAndEnvironment) {
  testing::TempDir dir;
  const auto file = (dir / "env").string();
  auto ok = RunOne({"/bin/sh", "-c", "echo $FROM_RUNNER$SPOTVISOR_HOOK > " + file}, 5s, {{"SPOTVISOR_HOOK", "x"}});
  EXPECT_EQ(ok.outcome, "ok");
  EXPECT_EQ(ok.exit_code, 0);
  EXPECT_EQ(testing::ReadFile(dir / "env"), "rx\n");
  auto failed = RunOne({"/bin/sh", "-c", "exit 3"}, 5s);
  EXPECT_EQ(failed.outcome, "failed");
  EXPECT_EQ(failed.exit_code, 3);
}

TEST(HookRunner, AHangingHookIsKilledAtItsTimeout) {
  const auto start = std::chrono::steady_clock::now();
  auto r = RunOne({"/bin/sh", "-c", "trap '' TERM; sleep 30 & wait"}, 300ms);
  const auto took = std::chrono::steady_clock::now() - start;
  EXPECT_EQ(r.outcome, "timeout");
  EXPECT_EQ(r.signal, SIGKILL);
  EXPECT_LT(took, 5s);  // the backgrounded sleep (same group) was killed too: no wait for it
  EXPECT_GE(took, 300ms);
}

TEST(HookRunner, MissingProgramIsASpawnFailure) {
  auto r = RunOne({"/nonexistent/upload"}, 1s);
  EXPECT_EQ(r.outcome, "spawn-failed");
  EXPECT_NE(r.message.find("/nonexistent/upload"), std::string::npos);
}

TEST(HookRunner, SupervisorReapingDoesNotStealTheHookStatus) {
  boost::asio::io_context io;
  process::ChildTable table;
  HookRunner runner(io, table, "/", {});
  HookResult out;
  runner.Run("on_checkpoint", {"/bin/sh", "-c", "sleep 0.2; exit 7"}, 5s, {}, [&](const HookResult& r) { out = r; });
  // What the driver does on every SIGCHLD, and a mirror upload thread while it waits:
  // reap every child, here from another thread, while the hook runs and after it exited.
  std::thread reaper([&] {
    testing::WaitUntil(
        [&] {
          table.Reap();
          return table.watched() == 0;
        },
        5s);
  });
  EXPECT_EQ(runner.running(), 1u);
  io.run();
  reaper.join();
  EXPECT_EQ(out.outcome, "failed");
  EXPECT_EQ(out.exit_code, 7);
}

TEST(HookRunner, ASecondRunOfTheSameHookIsSkippedWhileTheFirstRuns) {
  boost::asio::io_context io;
  process::ChildTable table;
  HookRunner runner(io, table, "/", {});
  std::vector<std::string> outcomes;
  runner.Run("on_checkpoint", {"/bin/sh", "-c", "sleep 0.2"}, 5s, {},
             [&](const HookResult& r) { outcomes.push_back(r.outcome); });
  runner.Run("on_checkpoint", {"/bin/true"}, 5s, {}, [&](const HookResult& r) { outcomes.push_back(r.outcome); });
  io.run();
  EXPECT_EQ(outcomes, (std::vector<std::string>{"skipped", "ok"}));
}

}  // namespace
}  // namespace spotvisor::hooks

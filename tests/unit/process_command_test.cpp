// The one command runner with real processes: asynchronous on an io_context that has no
// SIGCHLD handler (the pidfd wakes it), and blocking from a plain thread. Exit codes and
// signals, output lines, a deadline that kills the whole group (a grandchild too), a
// spawn failure that names the program, cancellation, and nothing left behind.
#include <gtest/gtest.h>
#include <signal.h>

#include <boost/asio/io_context.hpp>
#include <fstream>
#include <future>
#include <thread>

#include "spotvisor/process/blocking_command.hpp"
#include "spotvisor/process/child_table.hpp"
#include "spotvisor/process/command.hpp"
#include "spotvisor/process/process_group.hpp"
#include "support/test_support.hpp"

namespace spotvisor::process {
namespace {

namespace asio = boost::asio;
using namespace std::chrono_literals;
using testing::ProcessAlive;
using testing::ReadFile;
using testing::Subreaper;
using testing::TempDir;
using testing::WaitUntil;

CommandSpec Shell(const std::string& script, std::chrono::milliseconds timeout = 10s,
                  const std::filesystem::path& workdir = "/") {
  return {.argv = {"/bin/sh", "-c", script}, .workdir = workdir, .timeout = timeout};
}

pid_t ReadPid(const std::filesystem::path& file) {
  pid_t pid = 0;
  std::ifstream(file) >> pid;
  return pid;
}

// An io_context, a table and a runner on it, as the hooks have them (but no SIGCHLD set).
struct Loop {
  asio::io_context io;
  ChildTable table;
  std::unique_ptr<CommandRunner> runner = MakeCommandRunner(io, table);

  // Runs `spec` to its end on this thread's io_context.
  CommandOutcome Run(const CommandSpec& spec) {
    std::optional<CommandOutcome> out;
    runner->Start(spec, [&](const CommandOutcome& o) { out = o; });
    io.restart();
    io.run_for(30s);
    EXPECT_TRUE(out.has_value()) << "no outcome within 30 s";
    return out.value_or(CommandOutcome{});
  }
};

TEST(CommandRunner, ExitCodesAndSignalsWithoutASigchldHandler) {
  Loop loop;
  const auto exited = loop.Run(Shell("exit 3"));
  EXPECT_EQ(exited.end, CommandEnd::kExited);
  EXPECT_EQ(exited.exit_code, 3);
  EXPECT_FALSE(exited.ok());
  EXPECT_EQ(exited.Describe(), "exit code 3");
  const auto signaled = loop.Run(Shell("kill -TERM $$"));
  EXPECT_EQ(signaled.end, CommandEnd::kSignaled);
  EXPECT_EQ(signaled.signal, SIGTERM);
  EXPECT_EQ(signaled.Describe(), "killed by SIGTERM");
  EXPECT_TRUE(loop.Run(Shell("true")).ok());
  EXPECT_EQ(loop.table.watched(), 0u);
  EXPECT_EQ(loop.runner->running(), 0u);
}

TEST(CommandRunner, OutputLinesAreRelayedInOrderTheLastOneWithoutANewline) {
  Loop loop;
  std::vector<std::string> lines;
  auto spec = Shell("echo one; echo two >&2; printf 'three\\r\\nfour'");
  spec.on_line = [&](std::string_view line) { lines.emplace_back(line); };
  const auto outcome = loop.Run(spec);
  EXPECT_TRUE(outcome.ok()) << outcome.Describe();
  EXPECT_EQ(lines, (std::vector<std::string>{"one", "two", "three\r", "four"}));
}

TEST(CommandRunner, TheDeadlineKillsTheWholeGroupAGrandchildToo) {
  TempDir dir;
  Subreaper subreaper;
  Loop loop;
  const auto start = std::chrono::steady_clock::now();
  const auto outcome = loop.Run(Shell("trap '' TERM; sleep 30 & echo $! > grandchild; wait", 300ms, dir.path()));
  const auto took = std::chrono::steady_clock::now() - start;
  EXPECT_EQ(outcome.end, CommandEnd::kTimedOut);
  EXPECT_EQ(outcome.signal, SIGKILL);
  EXPECT_FALSE(outcome.group_survived);
  EXPECT_EQ(outcome.Describe(), "timed out after 300ms (SIGKILL to its process group)");
  EXPECT_GE(took, 300ms);
  EXPECT_LT(took, 10s);
  const pid_t grandchild = ReadPid(dir / "grandchild");
  ASSERT_GT(grandchild, 0);
  EXPECT_FALSE(ProcessAlive(grandchild));  // gone when `done` ran, not just signalled
}

TEST(CommandRunner, WhatIsLeftOfTheGroupGoesWithTheMainProcess) {
  TempDir dir;
  Subreaper subreaper;
  Loop loop;
  const auto outcome = loop.Run(Shell("sleep 30 & echo $! > grandchild; exit 0", 10s, dir.path()));
  EXPECT_TRUE(outcome.ok()) << outcome.Describe();
  const pid_t grandchild = ReadPid(dir / "grandchild");
  ASSERT_GT(grandchild, 0);
  EXPECT_FALSE(ProcessAlive(grandchild));
}

TEST(CommandRunner, ASpawnFailureNamesTheProgramAndComesAfterStart) {
  Loop loop;
  bool called = false;
  CommandOutcome out;
  loop.runner->Start({.argv = {"/nonexistent/upload", "x"}, .timeout = 1s}, [&](const CommandOutcome& o) {
    called = true;
    out = o;
  });
  EXPECT_FALSE(called);  // never inside Start
  loop.io.run_for(10s);
  ASSERT_TRUE(called);
  EXPECT_EQ(out.end, CommandEnd::kSpawnFailed);
  EXPECT_NE(out.Describe().find("/nonexistent/upload"), std::string::npos) << out.Describe();
  const auto no_timeout = loop.Run({.argv = {"/bin/true"}});
  EXPECT_EQ(no_timeout.end, CommandEnd::kSpawnFailed);
  EXPECT_NE(no_timeout.error.find("/bin/true"), std::string::npos) << no_timeout.error;
}

TEST(CommandRunner, CancelKillsTheGroupAndIsNotAFailureOfTheRunner) {
  TempDir dir;
  Subreaper subreaper;
  Loop loop;
  std::optional<CommandOutcome> out;
  const auto id = loop.runner->Start(Shell("sleep 30 & echo $! > grandchild; wait", 60s, dir.path()),
                                     [&](const CommandOutcome& o) { out = o; });
  ASSERT_TRUE(WaitUntil([&] {
    loop.io.poll();
    return ReadPid(dir / "grandchild") > 0;
  }));
  EXPECT_GT(loop.runner->pid(id), 0);
  loop.runner->Cancel(id);
  loop.io.run_for(30s);
  ASSERT_TRUE(out.has_value());
  EXPECT_EQ(out->end, CommandEnd::kCancelled);
  EXPECT_EQ(out->signal, SIGKILL);
  EXPECT_FALSE(ProcessAlive(ReadPid(dir / "grandchild")));
  EXPECT_EQ(loop.runner->pid(id), 0);
}

TEST(CommandRunner, DestroyingTheRunnerKillsWhatStillRunsWithoutACall) {
  TempDir dir;
  Subreaper subreaper;
  Loop loop;
  bool called = false;
  const auto id = loop.runner->Start(Shell("sleep 30", 60s), [&](const CommandOutcome&) { called = true; });
  const pid_t pid = loop.runner->pid(id);
  ASSERT_GT(pid, 0);
  loop.runner.reset();
  EXPECT_TRUE(WaitUntil([&] {
    loop.table.Reap();
    return !GroupExists(pid);
  }));
  loop.io.poll();
  EXPECT_FALSE(called);
}

TEST(BlockingCommand, WaitsWithADeadlineAndSignalsTheMainProcess) {
  asio::io_context io;
  ChildTable table;
  BlockingCommand command(table, Shell("trap 'exit 4' TERM; while :; do sleep 0.05; done"));
  EXPECT_FALSE(command.Wait(0ms).has_value());
  EXPECT_FALSE(command.Wait(50ms).has_value());  // still running: nullopt after 50 ms
  ASSERT_TRUE(WaitUntil([&] { return command.Signal(SIGTERM) && command.Wait(100ms).has_value(); }));
  const auto outcome = command.Wait(0ms);
  EXPECT_EQ(outcome->end, CommandEnd::kExited);
  EXPECT_EQ(outcome->exit_code, 4);
  EXPECT_FALSE(command.Signal(SIGTERM));  // over: nothing to signal
}

TEST(BlockingCommand, AStopFromAnotherThreadCancelsAtOnce) {
  TempDir dir;
  Subreaper subreaper;
  asio::io_context io;
  ChildTable table;
  std::stop_source stop;
  auto result = std::async(std::launch::async, [&] {
    return RunCommand(table, Shell("sleep 30 & echo $! > grandchild; wait", 60s, dir.path()), stop.get_token());
  });
  ASSERT_TRUE(WaitUntil([&] { return ReadPid(dir / "grandchild") > 0; }));
  const auto asked = std::chrono::steady_clock::now();
  stop.request_stop();
  ASSERT_EQ(result.wait_for(30s), std::future_status::ready);
  EXPECT_LT(std::chrono::steady_clock::now() - asked, 5s);
  const auto outcome = result.get();
  EXPECT_EQ(outcome.end, CommandEnd::kCancelled);
  EXPECT_EQ(outcome.Describe(), "cancelled (SIGKILL to its process group)");
  EXPECT_FALSE(ProcessAlive(ReadPid(dir / "grandchild")));
  EXPECT_EQ(table.watched(), 0u);
}

TEST(BlockingCommand, OutputAppendedToAFileAndATimeoutFromAPlainThread) {
  TempDir dir;
  asio::io_context io;
  ChildTable table;
  testing::WriteFile(dir / "log", "before\n");
  auto spec = Shell("echo out; echo err >&2", 10s, dir.path());
  spec.output_file = dir / "log";
  EXPECT_TRUE(RunCommand(table, spec).ok());
  EXPECT_EQ(ReadFile(dir / "log"), "before\nout\nerr\n");
  const auto slow = RunCommand(table, Shell("sleep 30", 200ms));
  EXPECT_EQ(slow.end, CommandEnd::kTimedOut);
  EXPECT_LT(slow.duration, 10s);
  const auto missing = RunCommand(table, {.argv = {"no-such-program-here"}, .timeout = 1s});
  EXPECT_EQ(missing.end, CommandEnd::kSpawnFailed);
  EXPECT_NE(missing.Describe().find("no-such-program-here"), std::string::npos) << missing.Describe();
}

TEST(BlockingCommand, LettingGoOfARunningCommandKillsItsGroup) {
  TempDir dir;
  asio::io_context io;
  ChildTable table;
  pid_t pid = 0;
  {
    BlockingCommand command(table, Shell("echo $$ > pid; exec sleep 30", 60s, dir.path()));
    ASSERT_TRUE(WaitUntil([&] { return ReadPid(dir / "pid") > 0; }));
    pid = ReadPid(dir / "pid");
    EXPECT_FALSE(command.Wait(0ms).has_value());
  }
  EXPECT_FALSE(GroupExists(pid));
  EXPECT_EQ(table.watched(), 0u);  // reaped by the destructor's wait, not left a zombie
}

}  // namespace
}  // namespace spotvisor::process

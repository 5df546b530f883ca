// The child table with real processes, in the driver's arrangement (an io thread that
// reaps on every SIGCHLD): statuses reach their watchers, orphans are reaped silently, a
// group watch ends only once the group is empty, spawns from other threads never lose a
// status, and a trainer, a hook and a mirror command share one table. Also checks that the
// table holds the program's only wait for any child.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>

#include <atomic>
#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/signal_set.hpp>
#include <fstream>
#include <future>
#include <thread>

#include "spotvisor/hooks/hook_runner.hpp"
#include "spotvisor/process/blocking_command.hpp"
#include "spotvisor/process/child_table.hpp"
#include "spotvisor/process/process_group.hpp"
#include "support/test_support.hpp"

namespace spotvisor::process {
namespace {

namespace asio = boost::asio;
using namespace std::chrono_literals;
using testing::Subreaper;
using testing::TempDir;
using testing::WaitUntil;

// The driver's arrangement: a table and an io thread that reaps on every SIGCHLD.
class IoThread {
 public:
  IoThread() {
    WaitChildren();
    thread_ = std::thread([this] { io.run(); });
  }
  ~IoThread() {
    // A SIGCHLD already delivered may complete after this cancel and wait again: the flag
    // stops that, or the loop never runs out of work and the join hangs.
    asio::post(io, [this] {
      stopping_ = true;
      sigchld_.cancel();
    });
    guard_.reset();
    thread_.join();
  }
  IoThread(const IoThread&) = delete;
  IoThread& operator=(const IoThread&) = delete;

  // Runs `f` on the io thread and waits for it.
  void OnIo(const std::function<void()>& f) {
    std::promise<void> done;
    asio::post(io, [&] {
      f();
      done.set_value();
    });
    done.get_future().wait();
  }

  asio::io_context io;
  ChildTable table;

 private:
  void WaitChildren() {
    sigchld_.async_wait([this](const boost::system::error_code& ec, int) {
      if (ec || stopping_) return;
      table.Reap();
      WaitChildren();
    });
  }

  asio::signal_set sigchld_{io, SIGCHLD};
  bool stopping_ = false;  // io thread only
  asio::executor_work_guard<asio::io_context::executor_type> guard_{asio::make_work_guard(io)};
  std::thread thread_;
};

SpawnSpec Shell(const std::string& script, const std::filesystem::path& workdir = "/") {
  SpawnSpec spec;
  spec.argv = {"/bin/sh", "-c", script};
  spec.workdir = workdir;
  return spec;
}

// Starts `script` and returns the future of its wait status.
std::future<int> Start(ChildTable& table, const std::string& script, pid_t* pid = nullptr,
                       const std::filesystem::path& workdir = "/") {
  auto status = std::make_shared<std::promise<int>>();
  auto child = table.Spawn(Shell(script, workdir), [status](int s) { status->set_value(s); });
  EXPECT_TRUE(child.ok()) << child.error().message;
  if (pid && child) *pid = child->pid;
  return status->get_future();
}

bool InProc(pid_t pid) { return std::filesystem::exists("/proc/" + std::to_string(pid)); }

pid_t ReadPid(const std::filesystem::path& file) {
  pid_t pid = 0;
  std::ifstream(file) >> pid;
  return pid;
}

TEST(ChildTable, AWatchedChildGetsItsExitStatus) {
  IoThread loop;
  auto exited = Start(loop.table, "exit 3");
  auto killed = Start(loop.table, "kill -9 $$");
  ASSERT_EQ(exited.wait_for(10s), std::future_status::ready);
  ASSERT_EQ(killed.wait_for(10s), std::future_status::ready);
  const int e = exited.get(), k = killed.get();
  EXPECT_TRUE(WIFEXITED(e));
  EXPECT_EQ(WEXITSTATUS(e), 3);
  EXPECT_TRUE(WIFSIGNALED(k));
  EXPECT_EQ(WTERMSIG(k), SIGKILL);
  EXPECT_TRUE(WaitUntil([&] { return loop.table.watched() == 0; }, 5s));
}

TEST(ChildTable, AFailedExecIsASpawnErrorAndLeavesNothingWatched) {
  IoThread loop;
  SpawnSpec spec;
  spec.argv = {"/bin/sh"};
  spec.workdir = "/nonexistent/dir";
  auto child = loop.table.Spawn(spec, [](int) { ADD_FAILURE() << "no status for a child that never ran"; });
  ASSERT_FALSE(child.ok());
  EXPECT_NE(child.error().message.find("/nonexistent/dir"), std::string::npos) << child.error().message;
  EXPECT_EQ(loop.table.watched(), 0u);
}

TEST(ChildTable, AnAdoptedOrphanIsReapedWithoutACallback) {
  TempDir dir;
  Subreaper subreaper;
  IoThread loop;
  std::atomic<int> calls{0};
  auto child = loop.table.Spawn(Shell("sleep 0.3 & echo $! > orphan", dir.path()), [&](int) { ++calls; });
  ASSERT_TRUE(child.ok());
  ASSERT_TRUE(WaitUntil([&] { return ReadPid(dir / "orphan") > 0 && calls == 1; }, 5s));
  const pid_t orphan = ReadPid(dir / "orphan");
  EXPECT_EQ(ReadProcStat(orphan).value_or(ProcStat{}).ppid, getpid());  // adopted: its parent is gone
  // A zombie keeps its /proc entry: it disappears once the table's Reap took the status.
  EXPECT_TRUE(WaitUntil([&] { return !InProc(orphan); }, 5s));
  EXPECT_EQ(calls, 1);
  EXPECT_EQ(loop.table.watched(), 0u);
}

TEST(ChildTable, AGroupWatchEndsOnlyOnceEveryMemberIsGoneAndReaped) {
  TempDir dir;
  Subreaper subreaper;
  IoThread loop;
  pid_t leader = 0;
  auto exited =
      Start(loop.table, "trap '' TERM; sleep 30 & echo $! > a; sleep 30 & echo $! > b; exit 0", &leader, dir.path());
  ASSERT_EQ(exited.wait_for(10s), std::future_status::ready);
  const pid_t a = ReadPid(dir / "a"), b = ReadPid(dir / "b");
  ASSERT_GT(a, 0);
  ASSERT_GT(b, 0);
  EXPECT_TRUE(GroupExists(leader));      // the leader is gone, its group lives on
  std::promise<std::vector<bool>> seen;  // gone, group exists, a in /proc, b in /proc: when `done` ran
  GroupWatch watch;
  loop.OnIo([&] {
    watch = loop.table.WatchGroup(loop.io, leader, 10s, [&](bool gone) {
      seen.set_value({gone, GroupExists(leader), InProc(a), InProc(b)});
    });
  });
  auto f = seen.get_future();
  ASSERT_EQ(f.wait_for(15s), std::future_status::ready);
  EXPECT_EQ(f.get(), (std::vector<bool>{true, false, false, false}));
  loop.OnIo([&] { watch = {}; });
}

TEST(ChildTable, ACancelledGroupWatchNeverCalls) {
  IoThread loop;
  pid_t leader = 0;
  auto exited = Start(loop.table, "exit 0", &leader);
  ASSERT_EQ(exited.wait_for(10s), std::future_status::ready);
  std::atomic<bool> called{false};
  loop.OnIo([&] {
    auto watch = loop.table.WatchGroup(loop.io, leader, 10s, [&](bool) { called = true; });
    watch.Cancel();
  });
  loop.OnIo([] {});  // the posted first poll has run (and returned at once)
  EXPECT_FALSE(called);
}

TEST(ChildTable, SpawnsFromOtherThreadsGetTheirStatusWhileTheIoThreadReaps) {
  IoThread loop;
  std::vector<std::thread> threads;
  std::atomic<int> right{0};
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < 8; ++i) {
        const int code = t * 10 + i;
        auto r = RunCommand(loop.table, {.argv = {"/bin/sh", "-c", "exit " + std::to_string(code)}, .timeout = 10s});
        if (r.end == CommandEnd::kExited && r.exit_code == code) ++right;
      }
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(right, 32);
  EXPECT_EQ(loop.table.watched(), 0u);
}

TEST(ChildTable, ATrainerAHookAndAMirrorCommandShareOneTable) {
  TempDir dir;
  Subreaper subreaper;
  IoThread loop;
  // The trainer leaves a grandchild behind in its group, as a DataLoader worker might.
  pid_t trainer = 0;
  auto trainer_status = Start(loop.table, "sleep 30 & sleep 0.3; exit 5", &trainer);
  std::promise<hooks::HookResult> hook_result;
  std::unique_ptr<hooks::HookRunner> hooks;
  loop.OnIo([&] {
    hooks = std::make_unique<hooks::HookRunner>(loop.io, loop.table, dir.path(), std::map<std::string, std::string>{});
    hooks->Run("on_checkpoint", {"/bin/sh", "-c", "sleep 0.2; exit 2"}, 10s, {},
               [&](const hooks::HookResult& r) { hook_result.set_value(r); });
  });
  auto mirror = std::async(std::launch::async, [&] {
    return RunCommand(loop.table,
                      {.argv = {"/bin/sh", "-c", "sleep 0.1; exit 4"}, .workdir = dir.path(), .timeout = 10s});
  });
  auto upload = mirror.get();
  ASSERT_NE(upload.end, CommandEnd::kSpawnFailed) << upload.error;
  EXPECT_EQ(upload.exit_code, 4);
  auto hook_future = hook_result.get_future();
  ASSERT_EQ(hook_future.wait_for(10s), std::future_status::ready);
  const auto hook = hook_future.get();
  EXPECT_EQ(hook.outcome, "failed");
  EXPECT_EQ(hook.exit_code, 2);
  ASSERT_EQ(trainer_status.wait_for(10s), std::future_status::ready);
  const int status = trainer_status.get();
  EXPECT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 5);
  std::promise<bool> group;
  GroupWatch watch;
  loop.OnIo([&] { watch = loop.table.WatchGroup(loop.io, trainer, 10s, [&](bool gone) { group.set_value(gone); }); });
  auto group_future = group.get_future();
  ASSERT_EQ(group_future.wait_for(15s), std::future_status::ready);
  EXPECT_TRUE(group_future.get());
  EXPECT_FALSE(GroupExists(trainer));
  loop.OnIo([&] {
    watch = {};
    hooks.reset();
  });
  EXPECT_EQ(loop.table.watched(), 0u);
}

// The invariant the table exists for: nothing else in the program waits for any child.
TEST(ChildTable, HoldsTheProgramsOnlyWaitForAnyChild) {
  std::vector<std::string> waiters;
  for (const auto& entry : std::filesystem::recursive_directory_iterator(std::string(SPOTVISOR_SOURCE_DIR) + "/src")) {
    if (!entry.is_regular_file()) continue;
    std::ifstream in(entry.path());
    const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    for (const char* call : {"waitpid(-1", "waitid(P_ALL", "waitid(static_cast<idtype_t>(P_PIDFD)", "__WALL"}) {
      if (text.find(call) != std::string::npos) {
        waiters.push_back(std::filesystem::relative(entry.path(), SPOTVISOR_SOURCE_DIR).string() + ": " + call);
      }
    }
  }
  EXPECT_EQ(waiters, (std::vector<std::string>{"src/process/child_table.cpp: waitpid(-1"}));
}

}  // namespace
}  // namespace spotvisor::process

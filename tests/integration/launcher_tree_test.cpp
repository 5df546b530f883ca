// The workers of a launcher found in /proc: real processes in a real tree. A launcher under a
// launcher (deepspeed -> launch) is walked through; a worker's own children are its own.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <thread>

#include "spotvisor/process/launcher.hpp"
#include "spotvisor/process/process_group.hpp"

namespace spotvisor::process {
namespace {

// bash with argv[0] `name` running `script`, in a process group of its own.
pid_t StartNamedBash(const char* name, const char* script) {
  const pid_t pid = fork();
  if (pid == 0) {
    setpgid(0, 0);
    execl("/bin/bash", name, "-c", script, static_cast<char*>(nullptr));
    _exit(127);
  }
  return pid;
}

// argv[0] and argv[1] of `pid` ("" for each it lacks): a process that exits between FindWorkers
// and this read has no command line left (a zombie's is empty).
std::string Arg(pid_t pid, std::size_t i) {
  const auto argv = CommandLine(pid);
  return i < argv.size() ? argv[i] : std::string();
}

TEST(LauncherTree, NestedLaunchersAreWalkedThroughAndWorkersChildrenLeftOut) {
  // deepspeed(bash) -> sleep 60                          a worker
  //                 -> torchrun(bash) -> sleep 61        a worker
  //                                   -> trainer(bash) -> sleep 62   a worker, and its child
  const pid_t root = StartNamedBash("deepspeed",
                                    "sleep 60 & (exec -a torchrun /bin/bash -c 'sleep 61 & (exec -a trainer /bin/bash "
                                    "-c \"sleep 62; :\") & wait') & wait");
  ASSERT_GT(root, 0);
  LauncherTree tree;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (std::chrono::steady_clock::now() < deadline) {
    tree = FindWorkers(root);
    if (tree.workers.size() >= 3 && GroupMembers(root).size() >= 6) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  std::vector<std::string> workers, launchers;
  for (pid_t p : tree.workers) workers.push_back(Arg(p, 0) + (Arg(p, 1).empty() ? "" : " " + Arg(p, 1)));
  for (pid_t p : tree.launchers) launchers.push_back(Arg(p, 0));
  std::sort(workers.begin(), workers.end());
  EXPECT_EQ(launchers, (std::vector<std::string>{"deepspeed", "torchrun"}));
  EXPECT_EQ(workers, (std::vector<std::string>{"sleep 60", "sleep 61", "trainer -c"}));
  EXPECT_EQ(GroupMembers(root).size(), 6u);  // the sleep 62 is in the group, not a worker

  // A stopped launcher is still walked; its exited workers (zombies, unreaped) are gone.
  ASSERT_EQ(kill(tree.launchers.back(), SIGSTOP), 0);
  // What a process is doing, as the log says it when a group would not stop: "pid comm T ...".
  const std::string held_prefix = std::to_string(tree.launchers.back()) + " bash T";
  std::string held;
  for (int i = 0; i < 500 && held.rfind(held_prefix, 0) != 0; ++i) {
    held = DescribeProcess(tree.launchers.back());
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  EXPECT_EQ(held.rfind(held_prefix, 0), 0u) << held;
  for (pid_t p : tree.workers) {
    if (Arg(p, 0) == "sleep" && Arg(p, 1) == "61") kill(p, SIGKILL);
  }
  std::vector<std::string> after;
  for (int i = 0; i < 500; ++i) {
    after.clear();
    for (pid_t p : FindWorkers(root).workers) {
      if (const std::string name = Arg(p, 0); !name.empty()) after.push_back(name);  // not one just killed
    }
    if (after.size() == 2) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  std::sort(after.begin(), after.end());
  EXPECT_EQ(after, (std::vector<std::string>{"sleep", "trainer"}));

  kill(-root, SIGKILL);
  waitpid(root, nullptr, 0);
  EXPECT_TRUE(FindWorkers(root).workers.empty());
  EXPECT_TRUE(FindWorkers(root).launchers.empty());
  EXPECT_EQ(DescribeProcess(root), std::to_string(root) + " gone");
}

}  // namespace
}  // namespace spotvisor::process

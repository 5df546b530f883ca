// What /proc says a process group holds open: OpenForWriting with a real child that opens
// files for writing, for reading and read-write, inside and outside the directory asked
// about, while this process (not in its group) holds one open for writing too.
#include "spotvisor/process/process_group.hpp"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <fstream>

#include "support/test_support.hpp"

namespace spotvisor::process {
namespace {

namespace fs = std::filesystem;
using namespace std::chrono_literals;
using testing::TempDir;
using testing::WaitUntil;
using testing::WriteFile;

TEST(OpenForWriting, TheFilesAGroupHoldsOpenForWritingUnderTheDirectoryAndNoOthers) {
  TempDir dir;
  fs::create_directories(dir / "ckpt" / "sub");
  WriteFile(dir / "ckpt" / "read", "r");
  WriteFile(dir / "ckpt" / "closed", "c");
  // Every path before the fork: the child only opens and waits.
  const std::string w = (dir / "ckpt" / "sub" / "w").string(), rw = (dir / "ckpt" / "rw").string(),
                    r = (dir / "ckpt" / "read").string(), outside = (dir / "outside").string(),
                    ready = (dir / "ready").string();
  const pid_t pid = fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    setpgid(0, 0);
    (void)open(w.c_str(), O_WRONLY | O_CREAT, 0644);
    (void)open(rw.c_str(), O_RDWR | O_CREAT, 0644);
    (void)open(r.c_str(), O_RDONLY);
    (void)open(outside.c_str(), O_WRONLY | O_CREAT, 0644);
    close(open(ready.c_str(), O_WRONLY | O_CREAT, 0644));
    for (;;) pause();
  }
  setpgid(pid, pid);
  ASSERT_TRUE(WaitUntil([&] { return fs::exists(ready); }, 10s));
  std::ofstream parents((dir / "ckpt" / "parents").string());  // this process is not in that group
  const auto held = OpenForWriting(pid, dir / "ckpt");
  kill(pid, SIGKILL);
  waitpid(pid, nullptr, 0);
  EXPECT_EQ(held, (std::set<fs::path>{fs::canonical(rw), fs::canonical(w)}));
  EXPECT_TRUE(OpenForWriting(pid, dir / "ckpt").empty()) << "a group that is gone holds nothing";
}

}  // namespace
}  // namespace spotvisor::process

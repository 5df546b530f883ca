// `spotvisor preflight` as a user runs it: a disk too slow for the AWS window (an injected
// rate), a disk too small (a 1 MiB tmpfs), and a machine where everything passes; the
// endpoint check against the in-process mock metadata server.
#include <gtest/gtest.h>

#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/post.hpp>
#include <thread>

#include "spotvisor/mock/mock_metadata_server.hpp"
#include "support/test_support.hpp"

namespace spotvisor {
namespace {

using testing::RunSpotvisor;
using testing::TempDir;
using testing::WriteFile;

class AwsMock {
 public:
  AwsMock() : guard_(io_.get_executor()), server_(io_, mock::MockProvider::kAws, mock::MockOptions{}) {
    EXPECT_TRUE(server_.Start().ok());
    thread_ = std::thread([this] { io_.run(); });
  }
  ~AwsMock() {
    boost::asio::post(io_, [this] { server_.Stop(); });
    guard_.reset();
    io_.stop();
    thread_.join();
  }
  std::string url() const { return server_.url(); }

 private:
  boost::asio::io_context io_;
  boost::asio::executor_work_guard<boost::asio::io_context::executor_type> guard_;
  mock::MockMetadataServer server_;
  std::thread thread_;
};

std::string Job(const std::string& ckpt_dir, const std::string& provider) {
  return "job:\n  name: p\n  command: [\"/bin/true\"]\ncheckpoints:\n  dir: " + ckpt_dir + "\n  keep: 3\n" + provider +
         "telemetry:\n  state_dir: ./state\n";
}

TEST(Preflight, ASlowDiskThatDoesNotFitTheWarningWindowFails) {
  TempDir dir;
  AwsMock mock;
  WriteFile(dir / "job.yaml", Job("./ckpt", "provider:\n  kind: aws\n  endpoint: " + mock.url() + "\n"));
  std::string out;
  EXPECT_EQ(RunSpotvisor({"preflight", "--config", (dir / "job.yaml").string(), "--assume-write-rate", "50MiB",
                          "--checkpoint-size", "12GiB"},
                         &out),
            1)
      << out;
  EXPECT_NE(
      out.find(
          "FAIL  write    write 50 MiB/s (assumed, --assume-write-rate) → a 12.0 GiB checkpoint (--checkpoint-size) "
          "takes ≈ 246 s here; the aws warning window is 120 s"),
      std::string::npos)
      << out;
  EXPECT_NE(out.find("ok    endpoint " + mock.url() +
                     "/latest/meta-data/spot/instance-action reachable: HTTP 404 "
                     "(no interruption scheduled)"),
            std::string::npos)
      << out;
  EXPECT_NE(out.find("  gpu      "), std::string::npos) << out;
}

TEST(Preflight, ATinyFilesystemFailsTheSpaceCheck) {
  if (geteuid() != 0) GTEST_SKIP() << "needs root for a tmpfs";
  TempDir dir;
  std::filesystem::create_directories(dir / "small");
  if (std::system(("mount -t tmpfs -o size=1m tmpfs " + (dir / "small").string()).c_str()) != 0) {
    GTEST_SKIP() << "cannot mount a tmpfs here";
  }
  WriteFile(dir / "job.yaml", Job((dir / "small").string(), ""));
  std::string out;
  const int code =
      RunSpotvisor({"preflight", "--config", (dir / "job.yaml").string(), "--checkpoint-size", "1MiB"}, &out);
  std::system(("umount " + (dir / "small").string()).c_str());
  EXPECT_EQ(code, 1) << out;
  EXPECT_NE(out.find("FAIL  disk"), std::string::npos) << out;
  EXPECT_NE(out.find("need 4.0 MiB = 4 × 1.0 MiB (--checkpoint-size)"), std::string::npos) << out;
  EXPECT_NE(out.find("write "), std::string::npos) << out;  // still measured, in a quarter of the space
}

TEST(Preflight, AllPassOnAFastDiskWithNoProvider) {
  TempDir dir;
  testing::WriteValidCheckpoint(dir / "ckpt" / "checkpoint-7");
  WriteFile(dir / "job.yaml", Job("./ckpt", ""));
  std::string out;
  EXPECT_EQ(RunSpotvisor({"preflight", "--config", (dir / "job.yaml").string(), "--write-size", "8MiB"}, &out), 0)
      << out;
  EXPECT_NE(out.find("the newest checkpoint, checkpoint-7"), std::string::npos) << out;
  EXPECT_NE(out.find("8.0 MiB written with fsync"), std::string::npos) << out;
  EXPECT_NE(out.find("no metadata endpoint (provider: none)"), std::string::npos) << out;
  EXPECT_EQ(out.find("FAIL"), std::string::npos) << out;
  EXPECT_NE(out.find("  gpu      none ("), std::string::npos) << "no NVIDIA driver here, said so\n" << out;
}

// With an NVML library present (the stand-in of tests/helpers/fake_nvml.cpp, found through
// LD_LIBRARY_PATH as the driver's would be through ld.so.cache), the GPU line names each
// device, its memory and the driver.
TEST(Preflight, TheGpuLineNamesDevicesMemoryAndDriverFromNvml) {
  TempDir dir;
  WriteFile(dir / "job.yaml", Job("./ckpt", ""));
  auto run =
      testing::Spawn({SPOTVISOR_BINARY, "preflight", "--config", (dir / "job.yaml").string(), "--write-size", "1MiB"},
                     dir / "out.txt", {{"LD_LIBRARY_PATH", SPOTVISOR_FAKE_NVML_DIR}});
  EXPECT_EQ(testing::WaitExit(run.pid), 0) << testing::ReadFile(dir / "out.txt");
  const std::string out = testing::ReadFile(dir / "out.txt");
  EXPECT_NE(
      out.find("  gpu      2 × NVIDIA (0: NVIDIA H200 (fake NVML), 141.0 GiB; 1: NVIDIA L4 (fake NVML), 24.0 GiB), "
               "driver 550.54.15-fake"),
      std::string::npos)
      << out;
}

}  // namespace
}  // namespace spotvisor

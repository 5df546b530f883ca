// Proof that `spotvisor mock-metadata` speaks the real protocols, with the providers'
// official clients from npm (tests/npm/): Google's gcp-metadata reads instance/preempted
// and a wait_for_change long-poll that returns at the flip; AWS's
// @aws-sdk/ec2-metadata-service gets an IMDSv2 token and reads spot/instance-action.
// Skipped, saying why, when Node.js or tests/npm/node_modules is missing.
#include <gtest/gtest.h>
#include <signal.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <sstream>

#include "support/test_support.hpp"

namespace spotvisor {
namespace {

using namespace std::chrono_literals;
namespace fs = std::filesystem;

const fs::path kNpmDir = fs::path(SPOTVISOR_SOURCE_DIR) / "tests" / "npm";

// `node` from PATH, or empty.
fs::path FindNode() {
  const char* path = std::getenv("PATH");
  std::stringstream dirs(path ? path : "");
  for (std::string dir; std::getline(dirs, dir, ':');) {
    const fs::path candidate = fs::path(dir) / "node";
    if (!dir.empty() && ::access(candidate.c_str(), X_OK) == 0) return candidate;
  }
  return {};
}

class NpmClientTest : public ::testing::Test {
 protected:
  void SetUp() override {
    node_ = FindNode();
    if (node_.empty()) GTEST_SKIP() << "Node.js is not on PATH; the npm protocol proof needs it";
    if (!fs::exists(kNpmDir / "node_modules" / "gcp-metadata") ||
        !fs::exists(kNpmDir / "node_modules" / "@aws-sdk" / "ec2-metadata-service")) {
      GTEST_SKIP() << "tests/npm/node_modules is missing: run tests/npm/setup.sh (npm ci) to "
                      "install the official gcp-metadata and @aws-sdk/ec2-metadata-service clients";
    }
  }
  void TearDown() override {
    if (mock_.pid > 0) {
      ::kill(mock_.pid, SIGTERM);
      EXPECT_EQ(testing::WaitExit(mock_.pid, 10s), 0) << testing::ReadFile(mock_.output);
    }
  }

  // Starts the real binary; returns its port.
  std::string StartMock(const std::vector<std::string>& extra) {
    std::vector<std::string> argv = {SPOTVISOR_BINARY, "mock-metadata", "--listen",
                                     "127.0.0.1:0",    "--port-file",   (dir_ / "port").string()};
    argv.insert(argv.end(), extra.begin(), extra.end());
    mock_ = testing::Spawn(argv, dir_ / "mock.log");
    EXPECT_TRUE(testing::WaitUntil([&] { return fs::exists(dir_ / "port"); }, 10s))
        << testing::ReadFile(dir_ / "mock.log");
    const std::string text = testing::ReadFile(dir_ / "port");
    return text.substr(0, text.find('\n'));
  }

  // Runs a node script against the mock; returns its exit code, output in `out`.
  int RunScript(const std::string& script, const std::string& port, std::string* out) {
    auto child = testing::Spawn({node_.string(), (kNpmDir / script).string(), port}, dir_ / "node.log");
    const int rc = testing::WaitExit(child.pid, 30s);
    *out = testing::ReadFile(dir_ / "node.log");
    return rc;
  }

  fs::path node_;
  testing::TempDir dir_;
  testing::Spawned mock_;
};

TEST_F(NpmClientTest, GcpMetadataReadsPreemptedAndLongPollReturnsAtTheFlip) {
  const std::string port = StartMock({"--provider", "gcp"});
  std::string out;
  EXPECT_EQ(RunScript("gcp_preempted.js", port, &out), 0) << out;
  EXPECT_NE(out.find("\"ok\":true"), std::string::npos) << out;
  EXPECT_NE(out.find("\"after\":\"TRUE\""), std::string::npos) << out;
}

TEST_F(NpmClientTest, AwsSdkGetsATokenAndReadsInstanceAction) {
  const std::string port = StartMock({"--provider", "aws", "--imdsv2-required"});
  std::string out;
  EXPECT_EQ(RunScript("aws_instance_action.js", port, &out), 0) << out;
  EXPECT_NE(out.find("\"action\":\"terminate\""), std::string::npos) << out;
}

}  // namespace
}  // namespace spotvisor

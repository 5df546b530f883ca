// The unit template as shipped: `systemd-analyze verify` accepts it (with ExecStart
// pointed at the binary under test, the only line changed), and the settings the exit
// codes rely on are there.
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <regex>

#include "spotvisor/config/loader.hpp"
#include "spotvisor/util/units.hpp"
#include "support/test_support.hpp"

namespace spotvisor {
namespace {

std::string Unit() {
  return testing::ReadFile(std::filesystem::path(SPOTVISOR_SOURCE_DIR) / "systemd" / "spotvisor@.service");
}

TEST(SystemdUnit, SettingsTheExitCodesRelyOn) {
  const std::string unit = Unit();
  for (const char* line :
       {"Type=notify\n", "KillMode=mixed\n", "Restart=on-failure\n", "RestartPreventExitStatus=1 3 64 73 78\n",
        "StateDirectory=spotvisor/%i\n", "After=network-online.target remote-fs.target",
        "ExecStart=/usr/local/bin/spotvisor run --config /etc/spotvisor/%i.yaml", "TimeoutStopSec=300s\n",
        "WatchdogSec="}) {
    EXPECT_NE(unit.find(line), std::string::npos) << line;
  }
  for (const char* gpu_breaker : {"\nPrivateDevices=yes", "\nDevicePolicy=closed", "\nMemoryDenyWriteExecute=yes"}) {
    EXPECT_EQ(unit.find(gpu_breaker), std::string::npos) << gpu_breaker;
  }
}

// Issue 12.9: the unit cut config/alibaba.yaml's 240 s grace at 150 s, and passed a
// --state-dir the example configs did not name (report --config read another directory).
TEST(SystemdUnit, EveryShippedConfigFitsTheStopTimeoutAndNamesTheStateDir) {
  const std::string unit = Unit();
  const auto at = unit.find("\nTimeoutStopSec=");
  ASSERT_NE(at, std::string::npos);
  const auto timeout = ParseDuration(unit.substr(at + 16, unit.find('\n', at + 1) - at - 16));
  ASSERT_TRUE(timeout);
  EXPECT_EQ(unit.find("--state-dir"), std::string::npos) << "the job file's telemetry.state_dir is the one";
  int count = 0;
  for (const auto& e : std::filesystem::directory_iterator(std::filesystem::path(SPOTVISOR_SOURCE_DIR) / "config")) {
    if (e.path().extension() != ".yaml") continue;
    ++count;
    auto job = config::LoadJobFile(e.path());
    ASSERT_TRUE(job) << job.error().message;
    EXPECT_LE(job->signals.grace + job->signals.kill_timeout + std::chrono::seconds(30), *timeout) << e.path();
    EXPECT_EQ(job->telemetry.state_dir, "/var/lib/spotvisor/" + job->job.name) << e.path();
  }
  EXPECT_GE(count, 5);
}

TEST(SystemdUnit, SystemdAnalyzeVerifyAcceptsIt) {
  if (std::system("command -v systemd-analyze > /dev/null 2>&1") != 0) {
    GTEST_SKIP() << "systemd-analyze not installed (Debian package `systemd`)";
  }
  testing::TempDir dir;
  std::string unit = Unit();
  const std::string from = "/usr/local/bin/spotvisor";
  unit.replace(unit.find(from), from.size(), SPOTVISOR_BINARY);
  testing::WriteFile(dir / "spotvisor@test.service", unit);
  const std::string cmd =
      "systemd-analyze verify " + (dir / "spotvisor@test.service").string() + " > " + (dir / "out").string() + " 2>&1";
  const int rc = std::system(cmd.c_str());
  EXPECT_EQ(WEXITSTATUS(rc), 0) << testing::ReadFile(dir / "out");
  EXPECT_EQ(testing::ReadFile(dir / "out"), "");
}

// The install path: `cmake --install` puts the binary, the unit and the example job files
// where the runbook says (a temp prefix here, so nothing outside it is touched).
TEST(Install, CmakeInstallPutsBinaryUnitAndExamplesInPlace) {
  testing::TempDir dir;
  const auto build = std::filesystem::path(SPOTVISOR_BINARY).parent_path();
  const std::string cmd = "cmake --install " + build.string() + " --prefix " + (dir / "p").string() + " > " +
                          (dir / "out").string() + " 2>&1";
  ASSERT_EQ(WEXITSTATUS(std::system(cmd.c_str())), 0) << testing::ReadFile(dir / "out");
  const auto prefix = dir / "p";
  for (const auto& rel : {"bin/spotvisor", "share/spotvisor/examples/aws.yaml", "share/spotvisor/examples/gcp.yaml",
                          "share/spotvisor/examples/azure.yaml", "share/spotvisor/examples/alibaba.yaml",
                          "share/doc/spotvisor/operations.md"}) {
    EXPECT_TRUE(std::filesystem::exists(prefix / rel)) << rel << "\n" << testing::ReadFile(dir / "out");
  }
  bool unit = false;
  for (const auto& e : std::filesystem::recursive_directory_iterator(prefix)) {
    unit = unit || e.path().filename() == "spotvisor@.service";
  }
  EXPECT_TRUE(unit) << testing::ReadFile(dir / "out");
  const std::string version = "\"" + (prefix / "bin" / "spotvisor").string() + "\" --version > " + (dir / "v").string();
  ASSERT_EQ(WEXITSTATUS(std::system(version.c_str())), 0);
  // The version, the commit it was built from (unknown without git) and the build type.
  EXPECT_TRUE(
      std::regex_match(testing::ReadFile(dir / "v"),
                       std::regex("spotvisor " SPOTVISOR_VERSION " \\(commit ([0-9a-f]{12}|unknown), build \\w+\\)\n")))
      << testing::ReadFile(dir / "v");
}

}  // namespace
}  // namespace spotvisor

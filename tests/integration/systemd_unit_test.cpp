// The unit template as shipped: `systemd-analyze verify` accepts it (with ExecStart
// pointed at the binary under test, the only line changed), and the settings the exit
// codes rely on are there.
#include <gtest/gtest.h>
#include <sys/wait.h>

#include "support/test_support.hpp"

namespace spotvisor {
namespace {

std::string Unit() { return testing::ReadFile(std::filesystem::path(SPOTVISOR_SOURCE_DIR) / "systemd" / "spotvisor@.service"); }

TEST(SystemdUnit, SettingsTheExitCodesRelyOn) {
  const std::string unit = Unit();
  for (const char* line : {"Type=notify\n", "KillMode=mixed\n", "Restart=on-failure\n", "RestartPreventExitStatus=1 3 64 73 78\n",
                           "StateDirectory=spotvisor/%i\n", "After=network-online.target remote-fs.target",
                           "ExecStart=/usr/local/bin/spotvisor run --config /etc/spotvisor/%i.yaml", "TimeoutStopSec=150s\n",
                           "WatchdogSec="}) {
    EXPECT_NE(unit.find(line), std::string::npos) << line;
  }
  for (const char* gpu_breaker : {"\nPrivateDevices=yes", "\nDevicePolicy=closed", "\nMemoryDenyWriteExecute=yes"}) {
    EXPECT_EQ(unit.find(gpu_breaker), std::string::npos) << gpu_breaker;
  }
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
  const std::string cmd = "systemd-analyze verify " + (dir / "spotvisor@test.service").string() + " > " +
                          (dir / "out").string() + " 2>&1";
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
  EXPECT_NE(testing::ReadFile(dir / "v").find("spotvisor"), std::string::npos);
}

}  // namespace
}  // namespace spotvisor

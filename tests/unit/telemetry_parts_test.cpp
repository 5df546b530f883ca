// Telemetry pieces on their own: secret files, the metrics address check, the Prometheus
// text writer, sd_notify against a real unix datagram socket, NVML absent.
#include <gtest/gtest.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <cstddef>
#include <cstring>

#include "spotvisor/telemetry/metrics_server.hpp"
#include "spotvisor/telemetry/metrics_text.hpp"
#include "spotvisor/telemetry/nvml.hpp"
#include "spotvisor/telemetry/run_metrics.hpp"
#include "spotvisor/telemetry/sd_notify.hpp"
#include "spotvisor/util/secret_file.hpp"
#include "support/test_support.hpp"

namespace spotvisor::telemetry {
namespace {

using testing::TempDir;
using testing::WriteFile;

TEST(SecretFile, TrailingWhitespaceIsIgnoredAndContentNeverInMessages) {
  TempDir dir;
  WriteFile(dir / "token", "s3cr3t-value \n\n");
  chmod((dir / "token").c_str(), 0600);
  auto token = ReadSecretFile(dir / "token", "metrics token");
  ASSERT_TRUE(token) << token.error().message;
  EXPECT_EQ(*token, "s3cr3t-value");

  chmod((dir / "token").c_str(), 0640);
  auto group = ReadSecretFile(dir / "token", "metrics token");
  ASSERT_FALSE(group);
  EXPECT_NE(group.error().message.find("accessible by group or others (mode 0640)"), std::string::npos);
  EXPECT_NE(group.error().message.find((dir / "token").string()), std::string::npos);
  EXPECT_EQ(group.error().message.find("s3cr3t"), std::string::npos);

  chmod((dir / "token").c_str(), 0604);
  EXPECT_FALSE(ReadSecretFile(dir / "token", "metrics token"));
  auto missing = ReadSecretFile(dir / "absent", "metrics token");
  ASSERT_FALSE(missing);
  EXPECT_NE(missing.error().message.find("cannot read the metrics token file"), std::string::npos);
  WriteFile(dir / "empty", " \n");
  chmod((dir / "empty").c_str(), 0600);
  EXPECT_FALSE(ReadSecretFile(dir / "empty", "metrics token"));
}

TEST(SecretFile, ConstantTimeEquals) {
  EXPECT_TRUE(ConstantTimeEquals("abc", "abc"));
  EXPECT_FALSE(ConstantTimeEquals("abc", "abd"));
  EXPECT_FALSE(ConstantTimeEquals("abc", "abcd"));
  EXPECT_FALSE(ConstantTimeEquals("", "a"));
}

TEST(MetricsConfig, NonLoopbackNeedsAToken) {
  config::MetricsSection m;
  m.listen = "127.0.0.1:9187";
  auto ok = CheckMetricsConfig(m);
  ASSERT_TRUE(ok);
  EXPECT_TRUE(ok->loopback);
  m.listen = "0.0.0.0:9187";
  auto refused = CheckMetricsConfig(m);
  ASSERT_FALSE(refused);
  EXPECT_NE(refused.error().message.find("not a loopback address"), std::string::npos);
  m.listen = "[::1]:0";
  EXPECT_TRUE(CheckMetricsConfig(m));
  m.listen = "metrics.example.com:80";
  EXPECT_FALSE(CheckMetricsConfig(m));
  m.listen = "127.0.0.1:99999";
  EXPECT_FALSE(CheckMetricsConfig(m));
  TempDir dir;
  WriteFile(dir / "token", "t0k3n\n");
  chmod((dir / "token").c_str(), 0600);
  m.listen = "0.0.0.0:9187";
  m.token_file = dir / "token";
  auto with_token = CheckMetricsConfig(m);
  ASSERT_TRUE(with_token) << with_token.error().message;
  EXPECT_EQ(with_token->token, "t0k3n");
}

TEST(MetricsText, EscapesLabelValuesAndHelp) {
  MetricsText m;
  m.Family("spotvisor_x", "gauge", "a \\ help\nline");
  m.Sample(1.5, {{"label", "a\"b\\c\nd"}});
  m.Sample(std::numeric_limits<double>::infinity());
  EXPECT_EQ(m.text(),
            "# HELP spotvisor_x a \\\\ help\\nline\n# TYPE spotvisor_x gauge\n"
            "spotvisor_x{label=\"a\\\"b\\\\c\\nd\"} 1.5\nspotvisor_x +Inf\n");
  EXPECT_EQ(LabelName("batch-size"), "batch_size");
  EXPECT_EQ(LabelName("1x"), "_1x");
}

using testing::NotifySocket;

TEST(SdNotify, SendsDatagramsToAPathSocket) {
  TempDir dir;
  const std::string path = (dir / "notify").string();
  NotifySocket server(path);
  SdNotifier n(path);
  EXPECT_TRUE(n.Send("READY=1"));
  EXPECT_EQ(server.Receive(), "READY=1");
  EXPECT_TRUE(n.Send("STOPPING=1\nSTATUS=exit 0"));
  EXPECT_EQ(server.Receive(), "STOPPING=1\nSTATUS=exit 0");
}

TEST(SdNotify, AbstractNamespaceAndEnvironment) {
  const std::string name = "@spotvisor-test-" + std::to_string(getpid());
  NotifySocket server(name);
  setenv("NOTIFY_SOCKET", name.c_str(), 1);
  setenv("WATCHDOG_USEC", "2000000", 1);
  setenv("WATCHDOG_PID", std::to_string(getpid()).c_str(), 1);
  auto n = SdNotifier::FromEnvironment();
  ASSERT_TRUE(n);
  EXPECT_EQ(getenv("NOTIFY_SOCKET"), nullptr);  // the trainer must not inherit it
  EXPECT_EQ(getenv("WATCHDOG_USEC"), nullptr);
  ASSERT_TRUE(n->watchdog_interval());
  EXPECT_EQ(*n->watchdog_interval(), std::chrono::milliseconds(500));  // a quarter
  EXPECT_TRUE(n->Send("WATCHDOG=1"));
  EXPECT_EQ(server.Receive(), "WATCHDOG=1");
  setenv("NOTIFY_SOCKET", name.c_str(), 1);
  setenv("WATCHDOG_USEC", "2000000", 1);
  setenv("WATCHDOG_PID", "1", 1);  // someone else's watchdog
  auto other = SdNotifier::FromEnvironment();
  ASSERT_TRUE(other);
  EXPECT_FALSE(other->watchdog_interval());
  EXPECT_FALSE(SdNotifier::FromEnvironment());  // unset now: not run by systemd
}

TEST(Nvml, AbsentLibrarySaysWhyOnce) {
  auto nvml = Nvml::Load("libnvidia-ml-not-here.so.1");
  ASSERT_FALSE(nvml);
  EXPECT_NE(nvml.error().message.find("no GPU telemetry"), std::string::npos);
  EXPECT_EQ(ThrottleReasonNames(0x40 | 0x4), (std::vector<std::string>{"sw_power_cap", "hw_thermal_slowdown"}));
}

}  // namespace
}  // namespace spotvisor::telemetry

// /metrics of a real `spotvisor run`: bearer token or 401 with no detail, `promtool check
// metrics` on the real output, and a real Prometheus server scraping it on loopback with
// and without the token. Skips (saying why) only when the Prometheus package is absent.
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <regex>

#include "support/test_support.hpp"

namespace spotvisor {
namespace {

using namespace std::chrono_literals;
using testing::ReadFile;
using testing::Spawn;
using testing::TempDir;
using testing::WaitExit;
using testing::WaitUntil;
using testing::WriteFile;

constexpr const char* kToken = "tok-3f9a1c77d2e04b5b";

// One HTTP exchange over a plain socket: the raw response.
std::string HttpGet(int port, const std::string& path, const std::string& auth) {
  const int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(port));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0) {
    close(fd);
    return "";
  }
  const std::string req = "GET " + path + " HTTP/1.1\r\nHost: 127.0.0.1\r\n" +
                          (auth.empty() ? "" : "Authorization: " + auth + "\r\n") + "Connection: close\r\n\r\n";
  (void)!write(fd, req.data(), req.size());
  std::string out;
  char buf[4096];
  ssize_t n;
  while ((n = read(fd, buf, sizeof buf)) > 0) out.append(buf, static_cast<std::size_t>(n));
  close(fd);
  return out;
}

int FreePort() {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr);
  socklen_t len = sizeof addr;
  getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len);
  close(fd);
  return ntohs(addr.sin_port);
}

std::string Shell(const std::string& command) {
  std::string out;
  FILE* p = popen((command + " 2>&1").c_str(), "r");
  char buf[4096];
  std::size_t n;
  while ((n = fread(buf, 1, sizeof buf, p)) > 0) out.append(buf, n);
  const int rc = pclose(p);
  return out + "\n[rc=" + std::to_string(WEXITSTATUS(rc)) + "]";
}

bool Have(const std::string& program) { return Shell("command -v " + program).find("[rc=0]") != std::string::npos; }

class MetricsRun : public ::testing::Test {
 protected:
  void SetUp() override {
    WriteFile(dir_ / "token", std::string(kToken) + "\n");
    chmod((dir_ / "token").c_str(), 0600);
    WriteFile(dir_ / "job.yaml",
              "job:\n  name: metrics\n  command: [\"" + std::string(SPOTVISOR_CHILD_HELPER) +
                  "\", \"--mode=sleep\"]\n"
                  "  labels: {model: tiny-1, precision: fp32}\n"
                  "telemetry:\n  state_dir: ./state\n  metrics: {listen: \"127.0.0.1:0\", token_file: ./token}\n"
                  "cost:\n  node_hour: 1.5\n  disk_gb: 10\n  disk_gb_month: 0.1\n");
    run_ = Spawn({SPOTVISOR_BINARY, "run", "--config", (dir_ / "job.yaml").string()}, dir_ / "out.log");
    ASSERT_TRUE(WaitUntil([&] {
      const std::string log = ReadFile(dir_ / "out.log");
      std::smatch m;  // points into `log`: read the port before `log` goes
      if (log.find("event=trainer_started") == std::string::npos ||
          !std::regex_search(log, m, std::regex("metrics_listening address=127\\.0\\.0\\.1:([0-9]+)"))) {
        return false;
      }
      port_ = std::stoi(m[1]);
      return true;
    })) << ReadFile(dir_ / "out.log");
  }
  void TearDown() override {
    kill(run_.pid, SIGTERM);
    EXPECT_EQ(WaitExit(run_.pid), 75) << ReadFile(dir_ / "out.log");
    // The token never reaches a log or the state dir.
    EXPECT_EQ(ReadFile(dir_ / "out.log").find(kToken), std::string::npos);
    for (const auto& e : std::filesystem::recursive_directory_iterator(dir_ / "state")) {
      if (e.is_regular_file()) {
        EXPECT_EQ(ReadFile(e.path()).find(kToken), std::string::npos) << e.path();
      }
    }
  }
  TempDir dir_;
  testing::Spawned run_;
  int port_ = 0;
};

TEST_F(MetricsRun, WrongOrMissingTokenGets401WithNoDetail) {
  for (const std::string& auth :
       std::vector<std::string>{"", "Bearer wrong", "Basic dG9rOnRvaw==", std::string("Bearer ") + kToken + "x"}) {
    const auto res = HttpGet(port_, "/metrics", auth);
    EXPECT_EQ(res.rfind("HTTP/1.1 401", 0), 0u) << res;
    EXPECT_NE(res.find("Content-Length: 0"), std::string::npos) << res;
    EXPECT_EQ(res.find("spotvisor_"), std::string::npos);
  }
  EXPECT_EQ(HttpGet(port_, "/other", "").rfind("HTTP/1.1 401", 0), 0u);  // not even whether a path exists
  const auto ok = HttpGet(port_, "/metrics", std::string("Bearer ") + kToken);
  EXPECT_EQ(ok.rfind("HTTP/1.1 200", 0), 0u) << ok;
  EXPECT_NE(ok.find("\nspotvisor_up 1\n"), std::string::npos) << ok;
  EXPECT_NE(ok.find("label_model=\"tiny-1\""), std::string::npos);
  EXPECT_NE(ok.find("spotvisor_instance_info{provider="), std::string::npos) << ok;
  // Every family the issue asks for is exported from the first scrape on (-1 or 0 until known).
  for (const char* family : {"spotvisor_up",
                             "spotvisor_job_info",
                             "spotvisor_attempts_total",
                             "spotvisor_restarts_total",
                             "spotvisor_notices_total",
                             "spotvisor_notice_to_signal_seconds",
                             "spotvisor_grace_used_seconds",
                             "spotvisor_checkpoints_total",
                             "spotvisor_checkpoint_newest_good_step",
                             "spotvisor_checkpoint_newest_age_seconds",
                             "spotvisor_checkpoint_write_seconds_total",
                             "spotvisor_checkpoint_overhead_ratio",
                             "spotvisor_trainer_uptime_seconds",
                             "spotvisor_goodput_ratio",
                             "spotvisor_steps_per_second",
                             "spotvisor_billed_seconds_total",
                             "spotvisor_cost_estimate",
                             "spotvisor_cost_unknown_components",
                             "spotvisor_gpu_telemetry_available",
                             "spotvisor_notice_outcomes_total",
                             "spotvisor_notice_to_saved_seconds",
                             "spotvisor_goodput_seconds",
                             "spotvisor_group_members",
                             "spotvisor_group_nodes",
                             "spotvisor_durable_newest_step",
                             "spotvisor_durable_newest_age_seconds",
                             "spotvisor_durable_pending_bytes",
                             "spotvisor_durability_fits",
                             "spotvisor_durability_margin_seconds"}) {
    EXPECT_NE(ok.find(std::string("\n# TYPE ") + family + " "), std::string::npos) << family;
  }
  // Egress, support, ... have no price: the high end is unknown, +Inf, never 0 (issue 12.4).
  EXPECT_NE(ok.find("spotvisor_cost_estimate{bound=\"high\",currency=\"USD\"} +Inf\n"), std::string::npos) << ok;
  EXPECT_NE(ok.find("spotvisor_attempts_total 1"), std::string::npos);
  EXPECT_NE(ok.find("spotvisor_phase{phase=\"running\"} 1"), std::string::npos);
  EXPECT_NE(ok.find("spotvisor_gpu_telemetry_available 0"), std::string::npos);  // no GPU here
  EXPECT_EQ(ReadFile(dir_ / "out.log").find("event=gpu_unavailable"),
            ReadFile(dir_ / "out.log").rfind("event=gpu_unavailable"));  // said once
}

TEST_F(MetricsRun, PromtoolAcceptsTheRealOutput) {
  if (!Have("promtool")) GTEST_SKIP() << "promtool not installed (Debian package `prometheus`)";
  const auto res = HttpGet(port_, "/metrics", std::string("Bearer ") + kToken);
  const auto body = res.substr(res.find("\r\n\r\n") + 4);
  WriteFile(dir_ / "metrics.txt", body);
  const auto out = Shell("promtool check metrics < " + (dir_ / "metrics.txt").string());
  EXPECT_NE(out.find("[rc=0]"), std::string::npos) << out << "\n" << body;
}

TEST_F(MetricsRun, APrometheusServerScrapesWithTheTokenAndIsRefusedWithout) {
  if (!Have("prometheus") || !Have("promtool"))
    GTEST_SKIP() << "prometheus not installed (Debian package `prometheus`)";
  const int web = FreePort();
  WriteFile(dir_ / "prometheus.yml",
            "global: {scrape_interval: 1s, scrape_timeout: 1s}\nscrape_configs:\n"
            "  - job_name: with_token\n    authorization: {type: Bearer, credentials_file: " +
                (dir_ / "token").string() + "}\n    static_configs: [{targets: [\"127.0.0.1:" + std::to_string(port_) +
                "\"]}]\n"
                "  - job_name: no_token\n    static_configs: [{targets: [\"127.0.0.1:" +
                std::to_string(port_) + "\"]}]\n");
  std::string binary = Shell("command -v prometheus");
  binary = binary.substr(0, binary.find('\n'));
  auto prom = Spawn(
      {binary, "--config.file=" + (dir_ / "prometheus.yml").string(), "--storage.tsdb.path=" + (dir_ / "tsdb").string(),
       "--web.listen-address=127.0.0.1:" + std::to_string(web)},
      dir_ / "prometheus.log");
  const std::string url = "http://127.0.0.1:" + std::to_string(web);
  std::string up;
  const bool scraped = WaitUntil(
      [&] {
        up = Shell("promtool query instant " + url + " 'up'");
        return up.find("job=\"with_token\"} => 1") != std::string::npos &&
               up.find("job=\"no_token\"} => 0") != std::string::npos;
      },
      30s);
  std::string value;
  if (scraped) {
    WaitUntil(
        [&] {
          value = Shell("promtool query instant " + url + " 'spotvisor_attempts_total'");
          return value.find("job=\"with_token\"} => 1") != std::string::npos;
        },
        10s);
  }
  kill(prom.pid, SIGTERM);
  WaitExit(prom.pid);
  ASSERT_TRUE(scraped) << up << "\n" << ReadFile(dir_ / "prometheus.log");
  EXPECT_NE(value.find("job=\"with_token\"} => 1"), std::string::npos) << value;
  EXPECT_EQ(value.find("no_token"), std::string::npos) << value;
}

// With an NVML library present (the stand-in of tests/helpers/fake_nvml.cpp on
// LD_LIBRARY_PATH), the GPU families carry each device's utilization, memory, temperature
// and throttle reasons, and the run record keeps the peak VRAM for the report.
TEST(MetricsGpu, NvmlSamplesBecomeMetricsAndThePeakReachesTheReport) {
  TempDir dir;
  WriteFile(dir / "job.yaml", "job:\n  name: gpu\n  command: [\"" + std::string(SPOTVISOR_CHILD_HELPER) +
                                  "\", \"--mode=sleep\"]\ntelemetry:\n  state_dir: ./state\n"
                                  "  metrics: {listen: \"127.0.0.1:0\"}\n");
  auto run = Spawn({SPOTVISOR_BINARY, "run", "--config", (dir / "job.yaml").string()}, dir / "out.log",
                   {{"LD_LIBRARY_PATH", SPOTVISOR_FAKE_NVML_DIR}});
  int port = 0;
  ASSERT_TRUE(WaitUntil([&] {
    const std::string log = ReadFile(dir / "out.log");
    std::smatch m;
    if (log.find("event=trainer_started") == std::string::npos ||
        !std::regex_search(log, m, std::regex("metrics_listening address=127\\.0\\.0\\.1:([0-9]+)"))) {
      return false;
    }
    port = std::stoi(m[1]);
    return true;
  })) << ReadFile(dir / "out.log");
  std::string metrics;
  ASSERT_TRUE(WaitUntil([&] {
    metrics = HttpGet(port, "/metrics", "");
    return metrics.find("spotvisor_gpu_temperature_celsius") != std::string::npos;
  })) << metrics;
  for (const char* line : {"spotvisor_gpu_telemetry_available 1",
                           "spotvisor_gpu_utilization_ratio{gpu=\"0\",model=\"NVIDIA H200 (fake NVML)\"} 0.37",
                           "spotvisor_gpu_memory_used_bytes{gpu=\"0\",model=\"NVIDIA H200 (fake NVML)\"} 42949672960",
                           "spotvisor_gpu_memory_capacity_bytes{gpu=\"1\",model=\"NVIDIA L4 (fake NVML)\"} 25769803776",
                           "spotvisor_gpu_temperature_celsius{gpu=\"0\",model=\"NVIDIA H200 (fake NVML)\"} 61",
                           "spotvisor_gpu_throttle{gpu=\"0\",reason=\"sw_power_cap\"} 1",
                           "spotvisor_gpu_throttle{gpu=\"1\",reason=\"gpu_idle\"} 1",
                           "spotvisor_gpu_throttle{gpu=\"0\",reason=\"gpu_idle\"} 0"}) {
    EXPECT_NE(metrics.find(line), std::string::npos) << line << "\n" << metrics;
  }
  EXPECT_EQ(ReadFile(dir / "out.log").find("event=gpu_unavailable"), std::string::npos);
  kill(run.pid, SIGTERM);
  EXPECT_EQ(WaitExit(run.pid), 75) << ReadFile(dir / "out.log");
  std::string report;
  ASSERT_EQ(testing::RunSpotvisor({"report", (dir / "state").string(), "--json"}, &report), 0) << report;
  EXPECT_NE(report.find("\"peak_vram_bytes\": 42949672960"), std::string::npos) << report;
  EXPECT_NE(report.find("550.54.15-fake"), std::string::npos) << report;
}

}  // namespace
}  // namespace spotvisor

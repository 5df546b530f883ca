// `spotvisor run` under a (stand-in) systemd: READY=1 once the trainer has started, STATUS=
// lines a person can read, WATCHDOG=1 at a quarter of WATCHDOG_USEC, STOPPING=1 on the way
// out; and `log_format: json` gives one JSON object per line with the event's fields.
#include <gtest/gtest.h>
#include <signal.h>

#include <nlohmann/json.hpp>
#include <sstream>

#include "support/test_support.hpp"

namespace spotvisor {
namespace {

using namespace std::chrono_literals;
using testing::NotifySocket;
using testing::ReadFile;
using testing::Spawn;
using testing::TempDir;
using testing::WaitExit;
using testing::WaitUntil;
using testing::WriteFile;

std::string HelperJob(const TempDir& dir, const std::string& mode, const std::string& extra = "") {
  return "job:\n  name: sd\n  command: [\"" + std::string(SPOTVISOR_CHILD_HELPER) + "\", \"" + mode +
         "\", \"--ready=" + (dir / "ready").string() +
         "\"]\nsignals:\n  grace: 2s\ntelemetry:\n  state_dir: ./state\n" + extra;
}

TEST(SdNotifyRun, ReadyStatusWatchdogAndStopping) {
  TempDir dir;
  const std::string socket = (dir / "notify").string();
  NotifySocket systemd(socket);
  WriteFile(dir / "job.yaml", HelperJob(dir, "--mode=sleep"));
  auto sv = Spawn({SPOTVISOR_BINARY, "run", "--config", (dir / "job.yaml").string()}, dir / "out.txt",
                  {{"NOTIFY_SOCKET", socket}, {"WATCHDOG_USEC", "400000"}});
  std::vector<std::string> got;
  auto saw = [&](const std::string& needle) {
    for (const auto& m : got) {
      if (m.find(needle) != std::string::npos) return true;
    }
    return false;
  };
  auto watchdogs = [&] {
    int n = 0;
    for (const auto& m : got) n += m == "WATCHDOG=1";
    return n;
  };
  const auto until = std::chrono::steady_clock::now() + 10s;
  while (std::chrono::steady_clock::now() < until && !(saw("READY=1") && watchdogs() >= 3 && saw("attempt 1"))) {
    got.push_back(systemd.Receive(500ms));
  }
  ASSERT_TRUE(saw("READY=1")) << ReadFile(dir / "out.txt");
  EXPECT_TRUE(std::filesystem::exists(dir / "ready")) << "READY=1 comes once the trainer has started";
  EXPECT_GE(watchdogs(), 3);
  EXPECT_TRUE(saw("STATUS=running, attempt 1")) << ::testing::PrintToString(got);
  kill(sv.pid, SIGTERM);
  EXPECT_EQ(WaitExit(sv.pid), 75) << ReadFile(dir / "out.txt");
  for (int i = 0; i < 50 && !saw("STOPPING=1"); ++i) got.push_back(systemd.Receive(200ms));
  // The stop extends systemd's stop timeout to the grace (2s) + kill timeout (10s) + 30s.
  EXPECT_TRUE(saw("EXTEND_TIMEOUT_USEC=42000000")) << ::testing::PrintToString(got);
  EXPECT_TRUE(saw("STOPPING=1")) << ::testing::PrintToString(got);
  EXPECT_TRUE(saw("STATUS=exit 75")) << ::testing::PrintToString(got);
}

TEST(JsonLogs, EveryLineIsOneJsonEventWithFields) {
  TempDir dir;
  WriteFile(dir / "job.yaml", HelperJob(dir, "--mode=exit", "  log_format: json\n"));
  std::string out;
  ASSERT_EQ(testing::RunSpotvisor({"run", "--config", (dir / "job.yaml").string()}, &out), 0) << out;
  std::istringstream lines(out);
  std::string line;
  int events = 0;
  bool exit_seen = false;
  while (std::getline(lines, line)) {
    if (line.empty()) continue;
    const auto j = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
    ASSERT_FALSE(j.is_discarded()) << "not one JSON object: " << line;
    ASSERT_TRUE(j.is_object()) << line;
    EXPECT_TRUE(j.contains("ts") && j.contains("level") && j.contains("event")) << line;
    EXPECT_EQ(j.value("job", ""), "sd") << line;
    ++events;
    if (j.value("event", "") == "exit") {
      exit_seen = true;
      EXPECT_EQ(j["code"], 0) << line;  // numbers are numbers
      EXPECT_NE(j.value("message", "").find("finished"), std::string::npos) << line;
    }
  }
  EXPECT_GE(events, 4) << out;
  EXPECT_TRUE(exit_seen) << out;
}

}  // namespace
}  // namespace spotvisor

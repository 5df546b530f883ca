// Every notice, end to end (issue 24), through a real `spotvisor run`: a real file watcher
// sees two notices; each time the trainer (the child helper) writes a checkpoint on its
// SIGTERM, the watcher judges it good and the path mirror uploads it. The report then gives
// each notice its times in order (signal <= saved <= validated <= mirrored), outcome
// "saved" and save_on_notice {2, 2}; the goodput buckets add up to the billed time; the
// metrics export the outcomes, the notice-to-saved histogram, the buckets and the group;
// the log has one event=notice_saved line per notice. And startup measured to the first
// heartbeat.
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <nlohmann/json.hpp>
#include <regex>

#include "support/test_support.hpp"

namespace spotvisor {
namespace {

using namespace std::chrono_literals;
using testing::Count;
using testing::ReadFile;
using testing::Spawn;
using testing::TempDir;
using testing::WaitExit;
using testing::WaitUntil;
using testing::WriteFile;

std::string Scrape(int port) {
  const int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(port));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0) {
    close(fd);
    return "";
  }
  const std::string req = "GET /metrics HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n";
  (void)!write(fd, req.data(), req.size());
  std::string out;
  char buf[4096];
  ssize_t n;
  while ((n = read(fd, buf, sizeof buf)) > 0) out.append(buf, static_cast<std::size_t>(n));
  close(fd);
  return out;
}

// The notices in run.json whose save was mirrored.
int Mirrored(const std::filesystem::path& state) {
  const std::string text = ReadFile(state / "run.json");
  if (text.empty()) return 0;
  int n = 0;
  for (const auto& notice : nlohmann::json::parse(text).value("notices", nlohmann::json::array())) {
    n += notice.value("mirrored_ms", nlohmann::json()).is_null() ? 0 : 1;
  }
  return n;
}

TEST(NoticeReport, EveryNoticeToItsDurableCheckpoint) {
  TempDir dir;
  const auto log = dir / "out.log";
  WriteFile(dir / "job.yaml",
            "job:\n  name: notices\n  command: [\"" + std::string(SPOTVISOR_CHILD_HELPER) +
                "\", \"--mode=checkpoint\", \"--ckpt-dir=" + (dir / "ckpt").string() +
                "\", \"--ready=" + (dir / "ready").string() +
                "\"]\n"
                "provider:\n  kind: file\n  file: ./notice\n  poll_interval: 50ms\n  resume_after: 300ms\n"
                "checkpoints:\n  dir: ./ckpt\n  pattern: \"ckpt_step{step}\"\n  validate: structure\n  format: any\n"
                "  mirror:\n    path: " +
                (dir / "mirror").string() +
                "\n"
                "signals:\n  grace: 10s\n"
                "telemetry:\n  state_dir: ./state\n  metrics: {listen: \"127.0.0.1:0\"}\n"
                "cost:\n  node_hour: 3.6\n");
  auto run = Spawn({SPOTVISOR_BINARY, "run", "--config", (dir / "job.yaml").string()}, log);
  for (int notice = 1; notice <= 2; ++notice) {
    ASSERT_TRUE(WaitUntil([&] { return std::filesystem::exists(dir / "ready"); }, 20s)) << ReadFile(log);
    std::filesystem::remove(dir / "ready");
    WriteFile(dir / "notice", "{\"kind\": \"test\"}");  // the default window: a deadline 30 s away
    ASSERT_TRUE(WaitUntil([&] { return Count(ReadFile(log), "event=notice_saved") == std::size_t(notice); }, 20s))
        << ReadFile(log);
    ASSERT_TRUE(WaitUntil([&] { return Mirrored(dir / "state") == notice; }, 20s)) << ReadFile(log);
    if (notice == 1) std::filesystem::remove(dir / "notice");  // it clears: resume after 300 ms
  }
  std::smatch m;
  const std::string text = ReadFile(log);
  ASSERT_TRUE(std::regex_search(text, m, std::regex("metrics_listening address=127\\.0\\.0\\.1:([0-9]+)"))) << text;
  const std::string metrics = Scrape(std::stoi(m[1]));
  kill(run.pid, SIGTERM);  // drained after the second notice: systemd's stop ends the wait
  EXPECT_EQ(WaitExit(run.pid), 75) << ReadFile(log);

  EXPECT_NE(metrics.find("\nspotvisor_notice_outcomes_total{outcome=\"saved\"} 2\n"), std::string::npos) << metrics;
  EXPECT_NE(metrics.find("\nspotvisor_notice_outcomes_total{outcome=\"not-saved\"} 0\n"), std::string::npos);
  EXPECT_NE(metrics.find("\nspotvisor_notice_to_saved_seconds_count 2\n"), std::string::npos) << metrics;
  EXPECT_NE(metrics.find("\nspotvisor_notice_to_saved_seconds_bucket{le=\"+Inf\"} 2\n"), std::string::npos);
  EXPECT_NE(metrics.find("\nspotvisor_notice_to_saved_seconds_bucket{le=\"30\"} 2\n"), std::string::npos);
  for (const char* bucket : {"productive", "lost", "checkpointing", "startup", "disrupted", "waiting", "idle"}) {
    EXPECT_NE(metrics.find(std::string("\nspotvisor_goodput_seconds{bucket=\"") + bucket + "\"} "), std::string::npos)
        << bucket;
  }
  EXPECT_NE(metrics.find("\nspotvisor_group_members 1\n"), std::string::npos) << metrics;
  EXPECT_NE(metrics.find("\nspotvisor_group_nodes 1\n"), std::string::npos) << metrics;

  const std::string out = ReadFile(log);
  EXPECT_EQ(Count(out, "event=notice_saved"), 2u) << out;
  EXPECT_EQ(Count(out, "outcome=saved "), 2u) << out;
  const auto report = nlohmann::json::parse(ReadFile(dir / "state" / "report.json"));
  EXPECT_EQ(report["report_version"], 2);
  ASSERT_EQ(report["notices"].size(), 2u) << report["notices"].dump(2);
  for (const auto& n : report["notices"]) {
    for (const char* key : {"signal_after_s", "saved_after_s", "validated_after_s", "mirrored_after_s",
                            "deadline_margin_s", "checkpoint", "step"}) {
      ASSERT_FALSE(n[key].is_null()) << key << ": " << n.dump(2);
    }
    const double signal = n["signal_after_s"], saved = n["saved_after_s"], validated = n["validated_after_s"];
    EXPECT_GE(signal, 0) << n.dump(2);
    EXPECT_LE(signal, saved) << n.dump(2);
    EXPECT_LE(saved, validated) << n.dump(2);
    EXPECT_LE(validated, n["mirrored_after_s"].get<double>()) << n.dump(2);
    EXPECT_GT(n["deadline_margin_s"].get<double>(), 0) << n.dump(2);
    EXPECT_EQ(n["outcome"], "saved") << n.dump(2);
    EXPECT_TRUE(n["steps_lost"].is_null()) << n.dump(2);
    EXPECT_TRUE(std::filesystem::exists(dir / "ckpt" / n["checkpoint"].get<std::string>())) << n.dump(2);
  }
  EXPECT_EQ(report["save_on_notice"], (nlohmann::json{{"notices", 2}, {"saved_in_window", 2}}));
  const auto& g = report["goodput"];
  double sum = 0;
  for (const auto& [name, v] : g["buckets"].items()) sum += v.get<double>();
  EXPECT_NEAR(sum, g["billed_s"].get<double>(), 0.01) << g.dump(2);
  EXPECT_GT(g["buckets"]["disrupted_s"].get<double>(), 0) << g.dump(2);  // two drains, a resume
  EXPECT_EQ(g["first_progress_from"], "first_checkpoint");
  EXPECT_FALSE(g["cost"].is_null()) << g.dump(2);
  const std::string md = ReadFile(dir / "state" / "report.md");
  EXPECT_NE(md.find("Saved in the window: 2 of 2 notices."), std::string::npos) << md;
  EXPECT_NE(md.find("## Goodput"), std::string::npos) << md;
}

// First progress from the heartbeat file: the trainer touches it after a second of
// "loading", works a second more and finishes. Startup is the time to the first touch.
TEST(NoticeReport, StartupEndsAtTheFirstHeartbeat) {
  TempDir dir;
  WriteFile(dir / "job.yaml", "job:\n  name: warmup\n  command: [\"/bin/sh\", \"-c\", \"sleep 1; touch " +
                                  (dir / "hb").string() +
                                  "; sleep 1\"]\n"
                                  "health:\n  heartbeat_file: ./hb\n  hang_timeout: 1m\n"
                                  "telemetry:\n  state_dir: ./state\n");
  std::string out;
  EXPECT_EQ(testing::RunSpotvisor({"run", "--config", (dir / "job.yaml").string()}, &out, 30s), 0) << out;
  EXPECT_NE(out.find("event=first_progress attempt=1 from=heartbeat"), std::string::npos) << out;
  const auto report = nlohmann::json::parse(ReadFile(dir / "state" / "report.json"));
  const auto& g = report["goodput"];
  EXPECT_EQ(g["first_progress_from"], "heartbeat") << g.dump(2);
  // A file time may be a tick behind the clock: at least 0.9 s of the 1 s sleep.
  EXPECT_GE(g["buckets"]["startup_s"].get<double>(), 0.9) << g.dump(2);
  EXPECT_GT(g["buckets"]["productive_s"].get<double>(), 0) << g.dump(2);
  EXPECT_EQ(g["buckets"]["lost_s"], 0.0) << g.dump(2);
  EXPECT_TRUE(g["cost"].is_null()) << g.dump(2);  // no prices: unknown, not 0
  double sum = 0;
  for (const auto& [name, v] : g["buckets"].items()) sum += v.get<double>();
  EXPECT_NEAR(sum, g["billed_s"].get<double>(), 0.01) << g.dump(2);
  EXPECT_EQ(report["save_on_notice"], (nlohmann::json{{"notices", 0}, {"saved_in_window", 0}}));
}

}  // namespace
}  // namespace spotvisor

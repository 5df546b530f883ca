// Notices that are not what they should be, end to end through the real binary: deadlines
// already past, far in the future or unreadable (the trainer still gets a bounded, sane
// grace and the job ends exactly), and a metadata endpoint flapping for a minute between
// healthy, dropped, silent, garbage, 503 and not-HTTP (no false notice, no crash, a bounded
// log, and the one real notice afterwards still stops the trainer within its window).
#include <gtest/gtest.h>
#include <signal.h>

#include <regex>

#include "support/plain_trainer.hpp"
#include "support/test_support.hpp"

namespace spotvisor {
namespace {

using namespace std::chrono_literals;
using testing::Count;
using testing::PlainJob;
using testing::ProcessAlive;
using testing::ReadFile;
using testing::Spawn;
using testing::TempDir;
using testing::TrainerJob;
using testing::TrainerPid;
using testing::UninterruptedDigest;
using testing::WaitExit;
using testing::WaitUntil;
using testing::WriteFile;

// "2s", "2s990ms", "750ms" (FormatDuration) -> milliseconds; -1 when it is none of these.
long long Millis(const std::string& text) {
  std::smatch m;
  static const std::regex re("^(?:([0-9]+)s)?(?:([0-9]+)ms)?$");
  if (text.empty() || !std::regex_match(text, m, re)) return -1;
  return (m[1].matched ? std::stoll(m[1]) * 1000 : 0) + (m[2].matched ? std::stoll(m[2]) : 0);
}

// The grace of the n-th (0-based) `event=stopping reason=notice` line, in ms; -1 if none.
long long NoticeGrace(const std::string& log, std::size_t n) {
  static const std::regex re("event=stopping reason=notice[^\n]* grace=([0-9a-z]+)");
  std::size_t i = 0;
  for (auto it = std::sregex_iterator(log.begin(), log.end(), re); it != std::sregex_iterator(); ++it, ++i) {
    if (i == n) return Millis((*it)[1]);
  }
  return -1;
}

// True once the trainer of `attempt` has printed a step (its signal handlers are in place).
bool Stepping(const std::string& log, int attempt) {
  const auto start = log.find("event=trainer_started attempt=" + std::to_string(attempt) + " ");
  return start != std::string::npos && log.find("\nstep=", start) != std::string::npos;
}

// Three notices in one run through the file provider, each cleared so the job resumes:
// a deadline already past gets provider.min_grace (not a SIGKILL), one far in the future
// gets signals.grace (not more), and an unreadable one counts as a notice with
// provider.default_window. The job then ends with the uninterrupted result.
TEST(NoticeFault, DeadlinesPastFarAndUnreadable) {
  TempDir dir;
  const std::string expected = UninterruptedDigest(dir, "400");
  ASSERT_FALSE(expected.empty());
  const auto notice = dir / "notice.json";
  WriteFile(dir / "job.yaml",
            TrainerJob(dir, {.steps = "400",
                             .step_sleep = "0.03",
                             .extra = "provider:\n  kind: file\n  file: " + notice.string() +
                                      "\n  poll_interval: 100ms\n  safety_margin: 1s\n  default_window: 4s\n"
                                      "  min_grace: 2s\n  resume_after: 200ms\n"
                                      "restart:\n  backoff: {initial: 10ms, max: 10ms, multiplier: 1, jitter: 0}\n"}));
  // signals.grace of TrainerJob is 1s: raise it so the caps are visible.
  std::string job = ReadFile(dir / "job.yaml");
  job.replace(job.find("grace: 1s"), 9, "grace: 4s");
  WriteFile(dir / "job.yaml", job);

  auto sv = Spawn({SPOTVISOR_BINARY, "run", "--config", (dir / "job.yaml").string()}, dir / "out.txt");
  const std::vector<std::pair<std::string, std::string>> notices = {
      {"past", R"({"deadline": "2001-01-01T00:00:00Z"})"},
      {"far", R"({"deadline": "2199-01-01T00:00:00Z"})"},
      {"unreadable", R"({"deadline": "next tuesday, around noon"})"},
  };
  for (std::size_t i = 0; i < notices.size(); ++i) {
    SCOPED_TRACE(notices[i].first);
    const int attempt = static_cast<int>(i) + 1;
    ASSERT_TRUE(WaitUntil([&] { return Stepping(ReadFile(dir / "out.txt"), attempt); }, 30s))
        << ReadFile(dir / "out.txt");
    WriteFile(dir / "notice.tmp", notices[i].second);
    std::filesystem::rename(dir / "notice.tmp", notice);
    ASSERT_TRUE(WaitUntil([&] { return Count(ReadFile(dir / "out.txt"), "[trainer] stopping") == i + 1; }, 15s))
        << ReadFile(dir / "out.txt");
    std::filesystem::remove(notice);
  }
  ASSERT_EQ(WaitExit(sv.pid, 90s), 0) << ReadFile(dir / "out.txt");
  const std::string out = ReadFile(dir / "out.txt");
  EXPECT_EQ(NoticeGrace(out, 0), 2000) << "a past deadline gets provider.min_grace\n" << out;
  EXPECT_NE(out.find("event=notice_deadline_near"), std::string::npos) << out;
  EXPECT_NE(out.find("has already passed"), std::string::npos) << out;
  EXPECT_EQ(NoticeGrace(out, 1), 4000) << "a far deadline is capped by signals.grace\n" << out;
  const auto unreadable = NoticeGrace(out, 2);
  EXPECT_GT(unreadable, 2500) << "an unreadable deadline: default_window - safety_margin\n" << out;
  EXPECT_LE(unreadable, 3000) << out;
  EXPECT_NE(out.find("(the notice stands)"), std::string::npos) << "the unreadable content is reported\n" << out;
  EXPECT_EQ(Count(out, "event=grace_expired"), 0u) << "every notice left time to save\n" << out;
  EXPECT_EQ(ReadFile(dir / "result"), expected) << out;
}

// A metadata endpoint (the mock, --flap) cycling every 500 ms through healthy, dropped,
// silent, garbage, 503 and not-HTTP for a minute, for every provider at once: no notice is
// invented, spotvisor stays up, its log stays bounded (the flapping is summarized), and the
// real notice that follows still stops the trainer with a checkpoint. A fresh supervisor
// (the machine's replacement) then finishes the job exactly. 1500 steps of 0.08 s: the
// trainer is still running when a watcher in its error backoff (up to a tenth of the
// provider's window, 12 s for AWS) sees the notice, on a loaded machine too.
TEST(NoticeFault, MetadataFlappingForAMinute) {
  TempDir dir;
  const std::string expected = UninterruptedDigest(dir, "1500");
  ASSERT_FALSE(expected.empty());
  struct Case {
    std::string provider;
    std::filesystem::path home;
    testing::Spawned mock, sv;
  };
  std::vector<Case> cases;
  for (const std::string provider : {"aws", "gcp", "azure", "alibaba"}) {
    Case c{provider, dir / provider, {}, {}};
    std::filesystem::create_directories(c.home);
    c.mock = Spawn({SPOTVISOR_BINARY, "mock-metadata", "--provider", provider, "--listen", "127.0.0.1:0", "--port-file",
                    (c.home / "port").string(), "--flap", "500ms", "--flap-for", "60s", "--preempt-after", "61s"},
                   c.home / "mock.txt");
    cases.push_back(std::move(c));
  }
  for (auto& c : cases) {
    ASSERT_TRUE(WaitUntil([&] { return std::filesystem::exists(c.home / "port"); }, 10s))
        << ReadFile(c.home / "mock.txt");
    std::string port = ReadFile(c.home / "port");
    port.erase(port.find_last_not_of("\n") + 1);
    WriteFile(c.home / "job.yaml",
              TrainerJob(dir, {.steps = "1500",
                               .step_sleep = "0.08",
                               .checkpoint_dir = (c.home / "ckpt").string(),
                               .state_dir = (c.home / "state").string()}) +
                  "provider:\n  kind: " + c.provider + "\n  endpoint: http://127.0.0.1:" + port +
                  "\n  poll_interval: 1s\n  request_timeout: 300ms\n  azure_vm_name: spotvisor-mock-vm\n");
    std::string job = ReadFile(c.home / "job.yaml");
    job.replace(job.find("result_file: ./result"), 21, "result_file: " + (c.home / "result").string());
    job.replace(job.find("grace: 1s"), 9, "grace: 10s");
    WriteFile(c.home / "job.yaml", job);
    c.sv = Spawn({SPOTVISOR_BINARY, "run", "--config", (c.home / "job.yaml").string()}, c.home / "out1.txt");
  }
  for (auto& c : cases) {
    SCOPED_TRACE(c.provider);
    ASSERT_TRUE(WaitUntil(
        [&] { return Count(ReadFile(c.home / "out1.txt"), "[trainer] stopping") > 0 || !ProcessAlive(c.sv.pid); },
        120s))
        << ReadFile(c.home / "out1.txt");
    ASSERT_TRUE(ProcessAlive(c.sv.pid)) << ReadFile(c.home / "out1.txt");
    kill(c.sv.pid, SIGTERM);  // the machine goes away
    EXPECT_EQ(WaitExit(c.sv.pid), 75) << ReadFile(c.home / "out1.txt");
    kill(c.mock.pid, SIGTERM);
    EXPECT_EQ(WaitExit(c.mock.pid), 0) << ReadFile(c.home / "mock.txt");
    const std::string out = ReadFile(c.home / "out1.txt");
    EXPECT_EQ(Count(out, "event=notice "), 1u) << "one notice, the real one\n" << out;
    EXPECT_EQ(Count(out, "[trainer] stopping"), 1u) << out;
    EXPECT_EQ(Count(out, "event=trainer_started"), 1u) << "no restart while flapping\n" << out;
    if (c.provider != "gcp") {  // (GCP's error backoff may keep it from seeing more than a few phases)
      EXPECT_GE(Count(out, "event=endpoint_flapping"), 1u) << "the flapping is said\n" << out;
    }
    const auto lines = Count(out, "event=endpoint_condition") + Count(out, "event=endpoint_recovered");
    EXPECT_GE(lines, 2u) << out;
    EXPECT_LE(lines, 24u) << "a bounded log: at most 6 changes per subject and window\n" << out;
    EXPECT_EQ(Count(out, "event=grace_expired"), 0u) << out;

    std::string job = ReadFile(c.home / "job.yaml");
    job.replace(job.find("kind: " + c.provider), 6 + c.provider.size(), "kind: none");
    job.replace(job.find("\"0.08\""), 6, "\"0\"");  // the rest of the job at full speed
    WriteFile(c.home / "job2.yaml", job);
    auto again = Spawn({SPOTVISOR_BINARY, "run", "--config", (c.home / "job2.yaml").string()}, c.home / "out2.txt");
    EXPECT_EQ(WaitExit(again.pid, 120s), 0) << ReadFile(c.home / "out2.txt");
    EXPECT_EQ(ReadFile(c.home / "result"), expected) << ReadFile(c.home / "out2.txt");
  }
}

}  // namespace
}  // namespace spotvisor

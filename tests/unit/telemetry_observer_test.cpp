// The telemetry observer in-process, in virtual time (FakeRunControl): the budget ends the run
// at the first check at or after the virtual time it runs out, and the metrics whose values
// depend on time (trainer uptime, billed time, checkpoint age, notice-to-signal, grace used)
// read the run's clock, fetched from the real /metrics endpoint on 127.0.0.1:0.
#include "spotvisor/telemetry/telemetry_observer.hpp"

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <csignal>
#include <regex>
#include <thread>

#include "spotvisor/config/loader.hpp"
#include "spotvisor/report/report.hpp"
#include "spotvisor/telemetry/run_ledger.hpp"
#include "support/fake_run_control.hpp"
#include "support/log_capture.hpp"
#include "support/test_support.hpp"

namespace spotvisor::telemetry {
namespace {

using namespace std::chrono_literals;
using testing::FakeRunControl;
using testing::TempDir;

// A job with telemetry only: no provider to ask, no GPU sampling, the state dir in `dir`.
config::JobConfig TelemetryJob(const TempDir& dir) {
  auto job = config::DefaultConfig(dir.path());
  job.job.name = "virtual";
  job.provider.kind = config::ProviderKind::kNone;
  job.telemetry.state_dir = dir / "state";
  job.telemetry.gpu_interval = Duration::zero();
  std::filesystem::create_directories(job.telemetry.state_dir);
  return job;
}

// 2 per node-hour and a budget of 1: it runs out after exactly half an hour of billed time.
void PriceAt2PerHourWithBudget1(config::JobConfig& job, Duration check_interval) {
  job.cost.configured = true;
  job.cost.node_hour = {true, 2, 2};
  job.cost.budget = 1;
  job.cost.check_interval = check_interval;
}

std::unique_ptr<supervisor::RunObserver> MakeObserver(const config::JobConfig& job) {
  auto made = MakeTelemetryObservers(job, nullptr, nullptr, report::WriteRunReport);
  EXPECT_TRUE(made) << made.error().message;
  EXPECT_EQ(made->size(), 1u);
  return std::move(made->front());
}

supervisor::SpawnAction Attempt(int n) {
  supervisor::SpawnAction a;
  a.attempt = n;
  a.restart_count = n - 1;
  return a;
}

struct BudgetCase {
  Duration check_interval;
  Duration stop_at;  // virtual time of the budget's stop request
};

class TelemetryBudget : public ::testing::TestWithParam<BudgetCase> {};

TEST_P(TelemetryBudget, StopsAtTheFirstCheckOnceTheBudgetIsSpent) {
  TempDir dir;
  auto job = TelemetryJob(dir);
  PriceAt2PerHourWithBudget1(job, GetParam().check_interval);
  FakeRunControl run(job);
  auto observer = MakeObserver(job);
  observer->OnStart(run);
  observer->OnAttemptStarted(Attempt(1), 4242);

  run.RunFor(GetParam().stop_at - 1ms);
  EXPECT_TRUE(run.Requests("stop:budget").empty()) << "stopped before the budget was spent";
  run.RunFor(2h);
  const auto stops = run.Requests("stop:budget");
  ASSERT_EQ(stops.size(), 1u) << "one stop, however long the run goes on";
  EXPECT_EQ(stops[0].at, GetParam().stop_at);
  EXPECT_NE(stops[0].detail.find("cost budget exhausted"), std::string::npos) << stops[0].detail;
  EXPECT_EQ(run.requests.size(), 1u);
}

INSTANTIATE_TEST_SUITE_P(CheckInterval, TelemetryBudget,
                         ::testing::Values(BudgetCase{60s, 30min},     // a check falls on the 30th minute
                                           BudgetCase{7min, 35min},    // the first check after it: 5 x 7 min
                                           BudgetCase{30min, 30min}),  // the very first check
                         [](const auto& param_info) {
                           return "Every" + std::to_string(param_info.param.check_interval.count() / 1000) + "s";
                         });

TEST(TelemetryBudgetOff, NoBudgetNoStop) {
  TempDir dir;
  auto job = TelemetryJob(dir);
  PriceAt2PerHourWithBudget1(job, 60s);
  job.cost.budget = 0;
  FakeRunControl run(job);
  auto observer = MakeObserver(job);
  observer->OnStart(run);
  observer->OnAttemptStarted(Attempt(1), 4242);
  run.RunFor(2h);
  EXPECT_TRUE(run.requests.empty());
}

// GET /metrics from 127.0.0.1:`port` on a thread of its own while this thread runs the loop
// that serves it; the clock's BackgroundWork keeps virtual time still meanwhile.
std::string FetchMetrics(FakeRunControl& run, int port) {
  std::string answer;
  auto working = run.clock_.BackgroundWork();
  std::thread client([&answer, port, working = std::move(working)]() mutable {
    const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_port = htons(static_cast<std::uint16_t>(port));
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0) {
      const std::string request = "GET /metrics HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n";
      (void)!::write(fd, request.data(), request.size());
      char buf[4096];
      for (ssize_t n; (n = ::read(fd, buf, sizeof buf)) > 0;) answer.append(buf, static_cast<std::size_t>(n));
    }
    ::close(fd);
    working.reset();
  });
  const auto before = run.clock_.elapsed();
  run.RunFor(0ms);  // serves the request; returns once the client let go of the clock
  client.join();
  EXPECT_EQ(run.clock_.elapsed(), before) << "virtual time moved while the request was served";
  return answer;
}

// The value of the sample line `name` (no labels) in a metrics text.
std::string Sample(const std::string& text, const std::string& name) {
  std::smatch m;
  if (!std::regex_search(text, m, std::regex("\n" + name + " ([^\n]+)\n"))) return "<absent>";
  return m[1];
}

TEST(TelemetryMetrics, TimesComeFromTheRunClock) {
  TempDir dir;
  auto job = TelemetryJob(dir);
  job.telemetry.metrics.listen = "127.0.0.1:0";
  FakeRunControl run(job);
  {  // a good checkpoint seen ten minutes before this run started
    RunLedger ledger;
    CheckpointRecord c;
    c.name = "checkpoint-100";
    c.step = 100;
    c.good = true;
    c.mtime_ms = UnixMillis(run.clock_.WallNow()) - 600'000;
    ledger.AddCheckpoint(c);
    ASSERT_TRUE(ledger.Save(job.telemetry.state_dir));
  }
  testing::LogCapture log;
  auto observer = MakeObserver(job);
  observer->OnStart(run);
  std::smatch bound;
  const std::string lines = log.Joined();
  ASSERT_TRUE(std::regex_search(lines, bound, std::regex("event=metrics_listening address=127\\.0\\.0\\.1:(\\d+)")))
      << lines;
  const int port = std::stoi(bound[1]);

  run.RunFor(10s);
  observer->OnAttemptStarted(Attempt(1), 4242);
  run.RunFor(90s);
  auto text = FetchMetrics(run, port);
  EXPECT_EQ(Sample(text, "spotvisor_trainer_uptime_seconds"), "90") << text;
  EXPECT_EQ(Sample(text, "spotvisor_billed_seconds_total"), "100");
  EXPECT_EQ(Sample(text, "spotvisor_checkpoint_newest_age_seconds"), "700");

  // A notice, the stop signal 1.5 s later, the trainer gone 42 s after that.
  observer->OnNotice(preemption::Notice{});
  run.RunFor(1500ms);
  observer->OnSignalSent(job.signals.on_notice, config::SignalTarget::kGroup);
  run.RunFor(42s);
  state::AttemptRecord ended;
  ended.attempt = 1;
  observer->OnAttemptEnded(ended);
  text = FetchMetrics(run, port);
  EXPECT_EQ(Sample(text, "spotvisor_notice_to_signal_seconds"), "1.5") << text;
  EXPECT_EQ(Sample(text, "spotvisor_grace_used_seconds"), "42");
  EXPECT_EQ(Sample(text, "spotvisor_trainer_uptime_seconds"), "0") << "no trainer runs";
  EXPECT_EQ(Sample(text, "spotvisor_billed_seconds_total"), "143.5");
  EXPECT_EQ(Sample(text, "spotvisor_checkpoint_newest_age_seconds"), "743.5");
  observer->OnExit(0, "done");
}

// The report is written by the function the observer was given (spotvisor run passes the
// report room's): once, at OnExit, as at the run's clock's time, not the machine's.
TEST(TelemetryReport, WrittenOnceAtExitAsAtTheRunsClock) {
  TempDir dir;
  auto job = TelemetryJob(dir);
  FakeRunControl run(job);
  std::vector<std::int64_t> written_at;
  auto made =
      MakeTelemetryObservers(job, nullptr, nullptr, [&written_at](const config::JobConfig&, std::int64_t now_ms) {
        written_at.push_back(now_ms);
        return std::optional<std::filesystem::path>();
      });
  ASSERT_TRUE(made) << made.error().message;
  auto& observer = made->front();
  observer->OnStart(run);
  observer->OnAttemptStarted(Attempt(1), 4242);
  run.RunFor(2h);
  EXPECT_TRUE(written_at.empty()) << "the report waits for the run's end";
  observer->OnExit(0, "done");
  ASSERT_EQ(written_at.size(), 1u);
  EXPECT_EQ(written_at[0], UnixMillis(run.clock_.WallNow()));
}

}  // namespace
}  // namespace spotvisor::telemetry

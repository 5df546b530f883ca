// Periodic and adaptive checkpoint requests end to end: the real spotvisor binary
// supervises the child helper in `checkpoint` mode (it never checkpoints by itself, only
// on SIGUSR1/SIGTERM), and the test reads checkpoints.jsonl. Also: a checkpoint-only
// notice (AWS rebalance from the in-process mock metadata server) gives one checkpoint.
#include <gtest/gtest.h>
#include <signal.h>

#include <algorithm>
#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/post.hpp>
#include <nlohmann/json.hpp>
#include <set>
#include <thread>

#include "spotvisor/mock/mock_metadata_server.hpp"
#include "support/test_support.hpp"

namespace spotvisor {
namespace {

using namespace std::chrono_literals;
using nlohmann::json;
using testing::ReadFile;
using testing::ReadLines;
using testing::Spawn;
using testing::TempDir;
using testing::WaitExit;
using testing::WaitUntil;
using testing::WriteFile;

std::string HelperJob(const TempDir&, const std::string& mode_args, const std::string& extra) {
  return "job:\n  name: cad\n  command: [\"" + std::string(SPOTVISOR_CHILD_HELPER) + "\", " + mode_args + "]\n" +
         "checkpoints:\n  dir: ./ckpt\n  pattern: \"ckpt_step{step}\"\n  format: any\n" +
         "signals:\n  grace: 2s\n  kill_timeout: 5s\n" +
         "restart:\n  backoff: {initial: 1ms, max: 10ms, multiplier: 2, jitter: 0}\n" +
         "telemetry:\n  state_dir: ./state\n" + extra;
}

std::vector<json> Records(const TempDir& dir, const std::string& event) {
  std::vector<json> out;
  for (const auto& line : ReadLines(dir / "state" / "checkpoints.jsonl")) {
    auto j = json::parse(line, nullptr, false);
    if (!j.is_discarded() && j.value("event", "") == event) out.push_back(j);
  }
  return out;
}

std::string CheckpointArgs(const TempDir& dir) {
  return "\"--mode=checkpoint\", \"--ckpt-dir=" + (dir / "ckpt").string() +
         "\", \"--ready=" + (dir / "ready").string() + "\"";
}

TEST(Cadence, FixedPeriodAsksForCheckpointsAndJournalsCostAndSize) {
  TempDir dir;
  WriteFile(dir / "job.yaml", HelperJob(dir, CheckpointArgs(dir), "cadence:\n  every: 300ms\n"));
  auto sv = Spawn({SPOTVISOR_BINARY, "run", "--config", (dir / "job.yaml").string()}, dir / "out.txt");
  ASSERT_TRUE(WaitUntil([&] { return Records(dir, "checkpoint").size() >= 3; }, 20s)) << ReadFile(dir / "out.txt");
  kill(sv.pid, SIGTERM);
  EXPECT_EQ(WaitExit(sv.pid), 75) << ReadFile(dir / "out.txt");
  const auto records = Records(dir, "checkpoint");
  for (std::size_t i = 0; i < 3; ++i) {
    EXPECT_EQ(records[i]["reason"], "cadence") << records[i].dump();
    EXPECT_GE(records[i]["cost_ms"].get<long>(), 0) << records[i].dump();
    EXPECT_GT(records[i]["size_bytes"].get<long>(), 0) << records[i].dump();
    EXPECT_EQ(records[i]["interval_ms"], 300) << records[i].dump();
    EXPECT_TRUE(records[i].contains("overhead_pct")) << records[i].dump();
  }
  const std::string out = ReadFile(dir / "out.txt");
  EXPECT_NE(out.find("event=checkpoint_requested detail=\"cadence every 300ms\""), std::string::npos) << out;
  EXPECT_NE(out.find("event=checkpoint_seen"), std::string::npos) << out;
}

// A trainer still starting up has no handler: SIGUSR1's default action would kill it. The
// helper in `exit` mode keeps the default dispositions and exits 0 after 600 ms; with a
// 1 s period no request may reach it, so the job is simply done.
TEST(Cadence, NeverBeforeTheTrainerHasRunOnePeriod) {
  TempDir dir;
  WriteFile(dir / "job.yaml",
            HelperJob(dir, "\"--mode=exit\", \"--sleep-ms=600\", \"--record=" + (dir / "rec").string() + "\"",
                      "cadence:\n  every: 1s\n"));
  std::string out;
  EXPECT_EQ(testing::RunSpotvisor({"run", "--config", (dir / "job.yaml").string()}, &out), 0) << out;
  EXPECT_EQ(ReadLines(dir / "rec").size(), 1u) << out;
  EXPECT_EQ(out.find("event=checkpoint_requested"), std::string::npos) << out;
}

TEST(Cadence, AdaptiveLogsCMAndTheClampedDalyInterval) {
  TempDir dir;
  WriteFile(dir / "job.yaml", HelperJob(dir, CheckpointArgs(dir),
                                        "cadence:\n  every: adaptive\n  min: 100ms\n  max: 1s\n  mtbi_prior: 1h\n"
                                        "  mtbi_priors: {none: 200s}\n"));
  auto sv = Spawn({SPOTVISOR_BINARY, "run", "--config", (dir / "job.yaml").string()}, dir / "out.txt");
  ASSERT_TRUE(WaitUntil([&] { return Records(dir, "checkpoint").size() >= 2; }, 20s)) << ReadFile(dir / "out.txt");
  kill(sv.pid, SIGTERM);
  EXPECT_EQ(WaitExit(sv.pid), 75) << ReadFile(dir / "out.txt");
  const std::string out = ReadFile(dir / "out.txt");
  // Before a cost is measured the interval is `min`; then Daly(C, M = 200 s prior for
  // provider none) = sqrt(2·C·2s)·(...) - C, clamped to [100ms, 1s].
  EXPECT_NE(out.find("event=cadence mode=adaptive C=unmeasured M=3m20s interval=100ms"), std::string::npos) << out;
  const auto intervals = Records(dir, "interval");
  ASSERT_FALSE(intervals.empty()) << out;
  const auto& first = intervals.front();
  EXPECT_EQ(first["m_ms"], 200000) << first.dump();
  EXPECT_TRUE(first.contains("c_ms")) << first.dump();
  EXPECT_GT(first["interval_ms"].get<long>(), 100) << first.dump();
  EXPECT_LE(first["interval_ms"].get<long>(), 1000) << first.dump();
  EXPECT_NE(out.find("event=cadence_interval C="), std::string::npos) << out;
  const auto checkpoints = Records(dir, "checkpoint");
  EXPECT_EQ(checkpoints.front()["reason"], "adaptive");
  EXPECT_TRUE(checkpoints.front().contains("expected_waste_pct")) << checkpoints.front().dump();
}

// Issue 36: with a mirror whose save + upload does not fit the warning window (here a 1 ms
// window, which nothing fits), the mirror's planner says so after the first upload and the
// adaptive cadence counts the upload in C from then on.
TEST(Cadence, AdaptiveCountsTheUploadWhenSaveAndUploadDoNotFitTheWindow) {
  TempDir dir;
  std::string job = HelperJob(dir, CheckpointArgs(dir),
                              "cadence:\n  every: adaptive\n  min: 100ms\n  max: 1h\n  mtbi_priors: {none: 200s}\n"
                              "provider:\n  default_window: 1ms\n");
  const std::string format = "  format: any\n";
  job.insert(job.find(format) + format.size(), "  mirror:\n    path: " + (dir / "bucket").string() + "\n");
  WriteFile(dir / "job.yaml", job);
  auto sv = Spawn({SPOTVISOR_BINARY, "run", "--config", (dir / "job.yaml").string()}, dir / "out.txt");
  const auto counted = [&] { return ReadFile(dir / "out.txt").find("the upload counts in C") != std::string::npos; };
  ASSERT_TRUE(WaitUntil(counted, 30s)) << ReadFile(dir / "out.txt");
  kill(sv.pid, SIGTERM);
  EXPECT_EQ(WaitExit(sv.pid), 75) << ReadFile(dir / "out.txt");
  const std::string out = ReadFile(dir / "out.txt");
  const auto risk = out.find("event=durability_at_risk window_s=0.0");
  const auto interval = out.find("event=cadence_interval C=");
  ASSERT_NE(risk, std::string::npos) << out;
  ASSERT_NE(interval, std::string::npos) << out;
  const auto line = out.substr(out.rfind('\n', out.find("the upload counts in C")) + 1);
  EXPECT_NE(line.find("+upload "), std::string::npos) << line;
  EXPECT_LT(risk, out.find("the upload counts in C")) << "the cadence heard it from the planner";
  const auto intervals = Records(dir, "interval");
  ASSERT_FALSE(intervals.empty()) << out;
  EXPECT_EQ(intervals.back()["reason"], "save + upload does not fit the warning window: the upload counts in C")
      << intervals.back().dump();
}

// M comes from the job's own history too: interruptions that earlier supervisors of this
// job recorded in attempts.jsonl shorten the 200 s prior before anything runs.
TEST(Cadence, AdaptiveMLearnsFromEarlierSupervisorsInterruptions) {
  TempDir dir;
  std::filesystem::create_directories(dir / "state");
  std::string history;
  for (int a = 1; a <= 4; ++a) {  // four attempts of 10 s, each ended by a preemption
    const long start = 1700000000000L + a * 20000L;
    history += "{\"attempt\":" + std::to_string(a) + ",\"started_ms\":" + std::to_string(start) +
               ",\"ended_ms\":" + std::to_string(start + 10000) +
               ",\"pid\":1,\"outcome\":\"preempted\",\"next\":\"drained\",\"exit_code\":0}\n";
  }
  WriteFile(dir / "state" / "attempts.jsonl", history);
  WriteFile(dir / "job.yaml", HelperJob(dir, CheckpointArgs(dir),
                                        "cadence:\n  every: adaptive\n  min: 100ms\n  max: 1s\n  mtbi_prior: 1h\n"
                                        "  mtbi_priors: {none: 200s}\n"));
  auto sv = Spawn({SPOTVISOR_BINARY, "run", "--config", (dir / "job.yaml").string()}, dir / "out.txt");
  ASSERT_TRUE(WaitUntil([&] {
    return ReadFile(dir / "out.txt").find("event=cadence mode=adaptive") != std::string::npos;
  })) << ReadFile(dir / "out.txt");
  kill(sv.pid, SIGTERM);
  EXPECT_EQ(WaitExit(sv.pid), 75) << ReadFile(dir / "out.txt");
  const std::string out = ReadFile(dir / "out.txt");
  // (200 s prior + 40 s observed) / (1 + 4 interruptions) = 48 s.
  EXPECT_NE(out.find("C=unmeasured M=48s interval=100ms interruptions_seen=4"), std::string::npos) << out;
  EXPECT_EQ(out.find("event=cadence mode=adaptive C=unmeasured M=3m20s"), std::string::npos) << "M is still the prior\n"
                                                                                             << out;
}

// The mock metadata server in this process, on its own thread.
class MockThread {
 public:
  MockThread() : guard_(io_.get_executor()), server_(io_, mock::MockProvider::kAws, mock::MockOptions{}) {
    auto port = server_.Start();
    EXPECT_TRUE(port.ok());
    thread_ = std::thread([this] { io_.run(); });
  }
  ~MockThread() {
    boost::asio::post(io_, [this] { server_.Stop(); });
    guard_.reset();
    io_.stop();
    thread_.join();
  }
  void Rebalance() {
    boost::asio::post(io_, [this] {
      mock::PreemptSpec spec;
      spec.notice = false;
      spec.rebalance = true;
      server_.Preempt(spec);
    });
  }
  // An interruption notice whose deadline is `deadline_in` away.
  void Notice(Duration deadline_in) {
    boost::asio::post(io_, [this, deadline_in] {
      mock::PreemptSpec spec;
      spec.deadline_in = deadline_in;
      server_.Preempt(spec);
    });
  }
  std::string url() const { return server_.url(); }

 private:
  boost::asio::io_context io_;
  boost::asio::executor_work_guard<boost::asio::io_context::executor_type> guard_;
  mock::MockMetadataServer server_;
  std::thread thread_;
};

TEST(Cadence, RebalanceRecommendationAsksForOneCheckpointWithoutStopping) {
  TempDir dir;
  MockThread mock;
  WriteFile(dir / "job.yaml", HelperJob(dir, CheckpointArgs(dir),
                                        "provider:\n  kind: aws\n  endpoint: " + mock.url() +
                                            "\n  poll_interval: 100ms\n  rebalance: checkpoint\n"
                                            "cadence:\n  every: 1h\n"));
  auto sv = Spawn({SPOTVISOR_BINARY, "run", "--config", (dir / "job.yaml").string()}, dir / "out.txt");
  ASSERT_TRUE(WaitUntil([&] { return std::filesystem::exists(dir / "ready"); })) << ReadFile(dir / "out.txt");
  mock.Rebalance();
  ASSERT_TRUE(WaitUntil([&] { return !Records(dir, "checkpoint").empty(); }, 20s)) << ReadFile(dir / "out.txt");
  const auto record = Records(dir, "checkpoint").front();
  EXPECT_EQ(record["reason"], "notice aws rebalance") << record.dump();
  EXPECT_TRUE(record.contains("cost_ms")) << record.dump();
  // Still running: a rebalance recommendation is not a stop.
  EXPECT_TRUE(testing::ProcessAlive(sv.pid));
  EXPECT_EQ(ReadFile(dir / "out.txt").find("event=signal_sent signal=SIGTERM"), std::string::npos);
  kill(sv.pid, SIGTERM);
  EXPECT_EQ(WaitExit(sv.pid), 75) << ReadFile(dir / "out.txt");
  // Exactly one checkpoint came from the rebalance (the others from the final SIGTERM).
  int rebalance = 0;
  for (const auto& r : Records(dir, "checkpoint")) rebalance += r["reason"] == "notice aws rebalance";
  EXPECT_EQ(rebalance, 1);
}

// Issue 35: a recommendation must never kill. The helper in `sleep` mode keeps SIGUSR1 at its
// default action (a script with no handler): the rebalance's checkpoint request is skipped,
// said once, and the trainer keeps running.
TEST(Cadence, ARebalanceNeverSignalsATrainerThatDoesNotCatchTheCheckpointSignal) {
  TempDir dir;
  MockThread mock;
  WriteFile(dir / "job.yaml", HelperJob(dir, "\"--mode=sleep\", \"--ready=" + (dir / "ready").string() + "\"",
                                        "provider:\n  kind: aws\n  endpoint: " + mock.url() +
                                            "\n  poll_interval: 100ms\n  rebalance: checkpoint\n"));
  auto sv = Spawn({SPOTVISOR_BINARY, "run", "--config", (dir / "job.yaml").string()}, dir / "out.txt");
  ASSERT_TRUE(WaitUntil([&] { return std::filesystem::exists(dir / "ready"); })) << ReadFile(dir / "out.txt");
  const pid_t trainer = std::stoi(ReadFile(dir / "ready"));
  mock.Rebalance();
  ASSERT_TRUE(WaitUntil(
      [&] { return ReadFile(dir / "out.txt").find("event=checkpoint_request_skipped") != std::string::npos; }, 20s))
      << ReadFile(dir / "out.txt");
  const std::string out = ReadFile(dir / "out.txt");
  EXPECT_NE(out.find("event=checkpoint_request_skipped detail=\"aws rebalance\" reason=\"no process catches SIGUSR1\""),
            std::string::npos)
      << out;
  EXPECT_EQ(out.find("event=signal_sent signal=SIGUSR1"), std::string::npos) << out;
  EXPECT_TRUE(testing::ProcessAlive(trainer)) << out;
  EXPECT_TRUE(testing::ProcessAlive(sv.pid)) << out;
  kill(sv.pid, SIGTERM);
  EXPECT_EQ(WaitExit(sv.pid), 75) << ReadFile(dir / "out.txt");
  // Ended by the stop (SIGTERM), not by the recommendation.
  EXPECT_NE(ReadFile(dir / "out.txt").find("killed by SIGTERM"), std::string::npos) << ReadFile(dir / "out.txt");
}

std::string NoticeJob(const TempDir& dir, const MockThread& mock, const std::string& mode_args) {
  return HelperJob(dir, mode_args, "provider:\n  kind: aws\n  endpoint: " + mock.url() + "\n  poll_interval: 100ms\n") +
         "health:\n  progress_pattern: \"step=(\\\\d+)\"\n";
}

// Starts `spotvisor run` on dir/job.yaml (its output in dir/out.txt), sends a notice with two
// minutes to its deadline once the trainer is ready, and waits until the stop is deferred.
testing::Spawned RunUntilDeferred(const TempDir& dir, MockThread& mock) {
  auto sv = Spawn({SPOTVISOR_BINARY, "run", "--config", (dir / "job.yaml").string()}, dir / "out.txt");
  EXPECT_TRUE(WaitUntil([&] { return std::filesystem::exists(dir / "ready"); })) << ReadFile(dir / "out.txt");
  mock.Notice(std::chrono::minutes(2));
  EXPECT_TRUE(
      WaitUntil([&] { return ReadFile(dir / "out.txt").find("event=stop_deferred") != std::string::npos; }, 20s))
      << ReadFile(dir / "out.txt");
  return sv;
}

// Waits until the notice's save is recorded and the trainer is drained (the record may come
// first: a save on the stop signal is judged once the trainer has exited); the output then.
std::string AwaitTheNoticesSave(const TempDir& dir) {
  WaitUntil(
      [&] {
        const std::string out = ReadFile(dir / "out.txt");
        return out.find("event=notice_saved") != std::string::npos && out.find("event=drained") != std::string::npos;
      },
      30s);
  return ReadFile(dir / "out.txt");
}

// Issue 35, item 2: a trainer with no SIGTERM handler (a script as it is) saves every 1.5 s; a
// notice with two minutes to its deadline lets it run on until its next save lands, then stops
// it: the stop comes after that save, which is the notice's.
TEST(DeferredStop, ATrainerThatCannotSaveOnSigtermRunsUntilItsNextCheckpoint) {
  TempDir dir;
  MockThread mock;
  std::filesystem::create_directories(dir / "ckpt");
  WriteFile(dir / "job.yaml",
            NoticeJob(dir, mock,
                      "\"--mode=periodic\", \"--every-ms=1500\", \"--ckpt-dir=" + (dir / "ckpt").string() +
                          "\", \"--ready=" + (dir / "ready").string() + "\""));
  auto sv = RunUntilDeferred(dir, mock);
  ASSERT_TRUE(WaitUntil([&] { return ReadFile(dir / "out.txt").find("event=drained") != std::string::npos; }, 30s))
      << ReadFile(dir / "out.txt");
  const std::string out = ReadFile(dir / "out.txt");
  EXPECT_NE(out.find("event=stop_deferred reason=\"no process catches SIGTERM\" until="), std::string::npos) << out;
  const auto ends = out.find("event=deferred_stop_ends why=\"a new good checkpoint landed");
  ASSERT_NE(ends, std::string::npos) << out;
  const auto sigterm = out.find("event=signal_sent signal=SIGTERM");
  EXPECT_LT(ends, sigterm) << out;
  // Paused while that save was judged (no step trained then is thrown away), woken after
  // the stop's signal, which it meets first.
  const auto frozen = out.find("event=signal_sent signal=SIGSTOP target=trainer");
  EXPECT_LT(out.find("event=trainer_frozen"), frozen) << out;
  EXPECT_LT(frozen, ends) << out;
  EXPECT_LT(sigterm, out.find("event=signal_sent signal=SIGCONT target=trainer")) << out;
  // The save made after the notice is the notice's: it counts as saved.
  EXPECT_NE(out.find("event=notice_saved"), std::string::npos) << out;
  kill(sv.pid, SIGTERM);
  EXPECT_EQ(WaitExit(sv.pid), 75) << ReadFile(dir / "out.txt");
}

// A trainer that catches SIGTERM (the helper in `checkpoint` mode saves on it) is stopped at
// once, as before.
TEST(DeferredStop, ATrainerThatCatchesSigtermIsStoppedAtOnce) {
  TempDir dir;
  MockThread mock;
  WriteFile(dir / "job.yaml", NoticeJob(dir, mock, CheckpointArgs(dir)));
  auto sv = Spawn({SPOTVISOR_BINARY, "run", "--config", (dir / "job.yaml").string()}, dir / "out.txt");
  ASSERT_TRUE(WaitUntil([&] { return std::filesystem::exists(dir / "ready"); })) << ReadFile(dir / "out.txt");
  mock.Notice(std::chrono::minutes(2));
  ASSERT_TRUE(WaitUntil([&] { return ReadFile(dir / "out.txt").find("event=drained") != std::string::npos; }, 30s))
      << ReadFile(dir / "out.txt");
  const std::string out = ReadFile(dir / "out.txt");
  EXPECT_EQ(out.find("event=stop_deferred"), std::string::npos) << out;
  EXPECT_NE(out.find("event=signal_sent signal=SIGTERM"), std::string::npos) << out;
  kill(sv.pid, SIGTERM);
  EXPECT_EQ(WaitExit(sv.pid), 75) << ReadFile(dir / "out.txt");
}

// A notice that comes before the trainer installed its SIGTERM handler (a script still
// importing its libraries) defers the stop, as for a script that never catches it; the
// deferral looks at the handlers again, and once the trainer catches SIGTERM it is stopped at
// once: it saves on the signal, and the save is the notice's.
TEST(DeferredStop, ATrainerThatCatchesSigtermOnlyAfterTheNoticeIsStoppedOnceItDoes) {
  TempDir dir;
  MockThread mock;
  WriteFile(dir / "job.yaml",
            NoticeJob(dir, mock, CheckpointArgs(dir) + ", \"--go=" + (dir / "handlers").string() + "\""));
  auto sv = RunUntilDeferred(dir, mock);
  WriteFile(dir / "handlers", "");
  // The save on SIGTERM is judged after the trainer exits (the notice's record waits for it).
  const std::string out = AwaitTheNoticesSave(dir);
  ASSERT_NE(out.find("event=notice_saved"), std::string::npos) << out;
  // Seen catching SIGTERM: stopped at once. A look that fell between the helper's two
  // sigaction calls saw SIGUSR1 caught first: asked, and stopped at that save.
  auto ends = out.find("event=deferred_stop_ends why=\"the trainer catches SIGTERM now: it saves on the stop\"");
  if (ends == std::string::npos) ends = out.find("event=deferred_stop_ends why=\"a new good checkpoint landed");
  ASSERT_NE(ends, std::string::npos) << out;
  EXPECT_LT(ends, out.find("event=signal_sent signal=SIGTERM")) << out;
  EXPECT_NE(out.find(" outcome=saved "), std::string::npos) << out;
  kill(sv.pid, SIGTERM);
  EXPECT_EQ(WaitExit(sv.pid), 75) << ReadFile(dir / "out.txt");
}

// A trainer that saves on request (SIGUSR1) but dies on SIGTERM: a notice's deferred stop asks
// it for a checkpoint at once, and stops it as soon as that save is judged good, which is the
// notice's.
TEST(DeferredStop, ATrainerThatSavesOnRequestButDiesOnSigtermIsAskedAndStoppedAtItsSave) {
  TempDir dir;
  MockThread mock;
  WriteFile(dir / "job.yaml", NoticeJob(dir, mock, CheckpointArgs(dir) + ", \"--dies-on-stop\""));
  auto sv = RunUntilDeferred(dir, mock);
  const std::string out = AwaitTheNoticesSave(dir);
  ASSERT_NE(out.find("event=notice_saved"), std::string::npos) << out;
  const auto asked = out.find("event=checkpoint_requested detail=\"aws terminate (the trainer catches SIGUSR1)\"");
  ASSERT_NE(asked, std::string::npos) << out;
  const auto ends = out.find("event=deferred_stop_ends why=\"a new good checkpoint landed");
  ASSERT_NE(ends, std::string::npos) << out;
  EXPECT_LT(asked, ends) << out;
  EXPECT_LT(ends, out.find("event=signal_sent signal=SIGTERM")) << out;
  EXPECT_NE(out.find(" outcome=saved "), std::string::npos) << out;
  kill(sv.pid, SIGTERM);
  EXPECT_EQ(WaitExit(sv.pid), 75) << ReadFile(dir / "out.txt");
}

// Issue 35, item 5: with the stop not deferred, a trainer without a SIGTERM handler loses the
// steps since its last save; the record names that save and counts the steps from its
// progress lines. An empty directory it made and has not written into is not "corrupt".
TEST(DeferredStop, NeverDeferredTheRecordNamesTheNewestGoodCheckpointAndTheStepsLost) {
  TempDir dir;
  MockThread mock;
  std::filesystem::create_directories(dir / "ckpt");
  std::string yaml =
      NoticeJob(dir, mock,
                "\"--mode=periodic\", \"--every-ms=1000\", \"--max-saves=2\", \"--ckpt-dir=" + (dir / "ckpt").string() +
                    "\", \"--ready=" + (dir / "ready").string() + "\"");
  // Two saves, then none: a save of the periodic rhythm cannot coincide with the notice's
  // SIGTERM (one did, 3 ms after it, on a busy machine: the notice was then saved).
  const std::string kill_line = "  kill_timeout: 5s\n";
  yaml.replace(yaml.find(kill_line), kill_line.size(), kill_line + "  defer_stop: never\n");
  WriteFile(dir / "job.yaml", yaml);
  auto sv = Spawn({SPOTVISOR_BINARY, "run", "--config", (dir / "job.yaml").string()}, dir / "out.txt");
  ASSERT_TRUE(WaitUntil([&] { return std::filesystem::exists(dir / "ready"); })) << ReadFile(dir / "out.txt");
  std::filesystem::create_directories(dir / "ckpt" / "ckpt_step0");  // made, not written yet
  auto good_seen = [&] {
    const std::string out = ReadFile(dir / "out.txt");
    std::size_t n = 0;
    for (auto at = out.find("verdict=good"); at != std::string::npos; at = out.find("verdict=good", at + 1)) ++n;
    return n;
  };
  ASSERT_TRUE(WaitUntil([&] { return good_seen() >= 2; }, 20s)) << ReadFile(dir / "out.txt");
  mock.Notice(std::chrono::minutes(2));
  ASSERT_TRUE(WaitUntil([&] { return ReadFile(dir / "out.txt").find("event=drained") != std::string::npos; }, 30s))
      << ReadFile(dir / "out.txt");
  kill(sv.pid, SIGTERM);
  EXPECT_EQ(WaitExit(sv.pid), 75) << ReadFile(dir / "out.txt");
  const std::string out = ReadFile(dir / "out.txt");
  EXPECT_EQ(out.find("event=stop_deferred"), std::string::npos) << out;
  const auto at = out.find("event=notice_not_saved");
  ASSERT_NE(at, std::string::npos) << out;
  const std::string line = out.substr(at, out.find('\n', at) - at);
  EXPECT_NE(line.find("checkpoint=ckpt_step"), std::string::npos) << line;
  EXPECT_EQ(line.find("steps_lost=unknown"), std::string::npos) << line;
  EXPECT_EQ(out.find("empty directory"), std::string::npos) << out;
}

// No periodic request while a stop is in progress: the trainer (ignoring SIGTERM, with
// SIGUSR1 at its default action, so a request would kill it) sits out its whole grace
// window and goes by SIGKILL, not by a cadence SIGUSR1.
TEST(Cadence, NoRequestWhileAStopIsInProgress) {
  TempDir dir;
  std::string yaml =
      HelperJob(dir, "\"--mode=ignore-term\", \"--ready=" + (dir / "ready").string() + "\"", "cadence:\n  every: 1s\n");
  yaml.replace(yaml.find("grace: 2s"), 9, "grace: 3s");
  WriteFile(dir / "job.yaml", yaml);
  auto sv = Spawn({SPOTVISOR_BINARY, "run", "--config", (dir / "job.yaml").string()}, dir / "out.txt");
  ASSERT_TRUE(WaitUntil([&] { return std::filesystem::exists(dir / "ready"); })) << ReadFile(dir / "out.txt");
  kill(sv.pid, SIGTERM);  // well inside the first period
  EXPECT_EQ(WaitExit(sv.pid), 75) << ReadFile(dir / "out.txt");
  const std::string out = ReadFile(dir / "out.txt");
  EXPECT_EQ(out.find("event=checkpoint_requested"), std::string::npos) << out;
  EXPECT_NE(out.find("event=grace_expired"), std::string::npos) << out;
  EXPECT_NE(out.find("killed by SIGKILL"), std::string::npos) << out;
}

// checkpoints.keep holds during a long run, not only at the next start: each new good
// checkpoint deletes the oldest beyond `keep` while the trainer goes on.
TEST(Retention, ALongRunKeepsOnlyTheNewestGoodCheckpoints) {
  TempDir dir;
  std::string yaml = HelperJob(dir, CheckpointArgs(dir), "");
  yaml.insert(yaml.find("  format: any\n"), "  keep: 2\n");
  WriteFile(dir / "job.yaml", yaml);
  auto sv = Spawn({SPOTVISOR_BINARY, "run", "--config", (dir / "job.yaml").string()}, dir / "out.txt");
  ASSERT_TRUE(WaitUntil([&] { return std::filesystem::exists(dir / "ready"); })) << ReadFile(dir / "out.txt");
  auto checkpoints = [&] {
    std::vector<std::string> names;
    for (const auto& e : std::filesystem::directory_iterator(dir / "ckpt")) {
      if (e.path().filename().string().rfind("ckpt_step", 0) == 0) names.push_back(e.path().filename().string());
    }
    return names;
  };
  std::set<std::string> written;
  for (int i = 0; i < 4; ++i) {
    kill(sv.pid, SIGUSR1);  // forwarded: the helper writes one more checkpoint
    ASSERT_TRUE(WaitUntil([&] {
      for (const auto& n : checkpoints()) written.insert(n);
      return written.size() == static_cast<std::size_t>(i + 1);
    })) << ReadFile(dir / "out.txt");
  }
  ASSERT_TRUE(WaitUntil([&] { return checkpoints().size() == 2; }, 20s)) << ReadFile(dir / "out.txt");
  // The two left are the two newest (the helper's step only grows).
  std::vector<long> steps;
  for (const auto& n : written) steps.push_back(std::stol(n.substr(9)));
  std::sort(steps.begin(), steps.end());
  for (const auto& n : checkpoints()) EXPECT_GE(std::stol(n.substr(9)), steps[2]) << n;
  const std::string out = ReadFile(dir / "out.txt");
  EXPECT_NE(out.find("event=checkpoint_deleted"), std::string::npos) << out;
  kill(sv.pid, SIGTERM);
  EXPECT_EQ(WaitExit(sv.pid), 75) << ReadFile(dir / "out.txt");
}

}  // namespace
}  // namespace spotvisor

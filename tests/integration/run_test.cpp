// `spotvisor run` end to end with real processes: the real binary supervises the child
// helper (tests/helpers/child_helper.cpp) in its different modes. No fixed sleeps: every
// wait polls with a deadline.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <ctime>
#include <fstream>
#include <tuple>
#include <vector>

#include "spotvisor/util/units.hpp"
#include "support/test_support.hpp"

namespace spotvisor {
namespace {

using namespace std::chrono_literals;
using testing::ProcessAlive;
using testing::ReadFile;
using testing::ReadLines;
using testing::RunSpotvisor;
using testing::Spawn;
using testing::TempDir;
using testing::WaitExit;
using testing::WaitUntil;
using testing::WriteFile;

// A job file around the child helper; `helper_args` are the helper's flags.
std::string JobYaml(const TempDir& dir, const std::string& helper_args, const std::string& extra = "") {
  std::string args =
      "\"" + std::string(SPOTVISOR_CHILD_HELPER) + "\", \"--record=" + (dir / "record.txt").string() + "\"";
  std::string rest = helper_args;
  while (!rest.empty()) {
    const auto space = rest.find(' ');
    args += ", \"" + rest.substr(0, space) + "\"";
    rest = space == std::string::npos ? "" : rest.substr(space + 1);
  }
  return "job:\n  name: t\n  command: [" + args +
         "]\n  resume_args: [\"--resume_from={checkpoint}\", \"--step={step}\"]\n" +
         "  env: {HELPER_ENV: \"from-job\"}\n" + "checkpoints:\n  dir: ./ckpt\n  pattern: \"ckpt_step{step}\"\n" +
         "signals:\n  grace: 2s\n  kill_timeout: 5s\n" +
         "restart:\n  backoff: {initial: 1ms, max: 10ms, multiplier: 2, jitter: 0}\n" +
         "telemetry:\n  state_dir: ./state\n" + extra;
}

std::string WriteJob(const TempDir& dir, const std::string& helper_args, const std::string& extra = "") {
  WriteFile(dir / "job.yaml", JobYaml(dir, helper_args, extra));
  return (dir / "job.yaml").string();
}

// Fields of the n-th line the helper recorded ("key=value" separated by spaces).
std::string Field(const std::string& line, const std::string& key) {
  const auto at = line.find(" " + key + "=");
  const auto start = at == std::string::npos ? (line.rfind(key + "=", 0) == 0 ? 0 : std::string::npos) : at + 1;
  if (start == std::string::npos) return "<missing>";
  const auto value = start + key.size() + 1;
  if (key == "argv") return line.substr(value);
  return line.substr(value, line.find(' ', value) - value);
}

pid_t ReadPid(const std::filesystem::path& file) {
  std::ifstream in(file);
  pid_t pid = 0;
  in >> pid;
  return pid;
}

TEST(Run, CleanExitIsDoneWithCode0AndAPristineChild) {
  TempDir dir;
  std::string out;
  EXPECT_EQ(RunSpotvisor({"run", "--config", WriteJob(dir, "--mode=exit --code=0")}, &out), 0) << out;
  const auto lines = ReadLines(dir / "record.txt");
  ASSERT_EQ(lines.size(), 1u) << out;
  EXPECT_EQ(Field(lines[0], "pid"), Field(lines[0], "pgid"));  // its own process group
  EXPECT_EQ(Field(lines[0], "blocked"), "0");                  // clean signal mask
  EXPECT_EQ(Field(lines[0], "term_default"), "1");             // default handlers
  EXPECT_EQ(Field(lines[0], "HELPER_ENV"), "from-job");
  EXPECT_EQ(Field(lines[0], "SPOTVISOR_ATTEMPT"), "1");
  EXPECT_EQ(Field(lines[0], "SPOTVISOR_JOB"), "t");
  EXPECT_EQ(Field(lines[0], "SPOTVISOR_RESUME_FROM"), "");
  EXPECT_EQ(Field(lines[0], "cwd"), dir.path().string());
  EXPECT_EQ(Field(lines[0], "argv").find("--resume_from"), std::string::npos);  // fresh start
  EXPECT_NE(out.find("event=exit code=0"), std::string::npos) << out;
}

// Issue 35: a Python trainer's last lines reach the log even when it is killed, because its
// stdout is unbuffered by default; job.env, or spotvisor's own environment, decides otherwise.
TEST(Run, PythonUnbufferedReachesTheTrainerUnlessTheJobOrTheEnvironmentSetsIt) {
  unsetenv("PYTHONUNBUFFERED");
  const std::string relayed = "health:\n  progress_pattern: \"step=(\\\\d+)\"\n";  // output through our pipes
  // What the trainer got: by default, with job.env's "" (off), with spotvisor's own "0".
  auto run = [&](bool job_env_off, const char* inherited) {
    TempDir dir;
    std::string yaml = JobYaml(dir, "--mode=exit", relayed);
    if (job_env_off) {
      yaml.replace(yaml.find("HELPER_ENV: \"from-job\""), 22, "HELPER_ENV: \"from-job\", PYTHONUNBUFFERED: \"\"");
    }
    WriteFile(dir / "job.yaml", yaml);
    if (inherited) setenv("PYTHONUNBUFFERED", inherited, 1);
    std::string out;
    EXPECT_EQ(RunSpotvisor({"run", "--config", (dir / "job.yaml").string()}, &out), 0) << out;
    unsetenv("PYTHONUNBUFFERED");
    const auto lines = ReadLines(dir / "record.txt");
    return lines.size() == 1 ? Field(lines[0], "PYTHONUNBUFFERED") : "<" + std::to_string(lines.size()) + " lines>";
  };
  EXPECT_EQ(run(false, nullptr), "1");
  EXPECT_EQ(run(true, nullptr), "");
  EXPECT_EQ(run(false, "0"), "0");
}

// A trainer's last lines are relayed before its exit is: a crash's last words come before
// `attempt_ended` in the log, not after it (nor lost, when spotvisor exits at once). The
// burst before them leaves the pipe full when the trainer exits.
TEST(Run, ATrainersLastLinesComeBeforeItsExit) {
  TempDir dir;
  WriteFile(dir / "job.yaml",
            "job:\n  name: t\n  command: [\"/bin/sh\", \"-c\", \"i=0; while [ $i -lt 3000 ]; do "
            "echo 'step '$i' ....................................................................'; "
            "i=$((i+1)); done; echo last-words >&2; echo last-line; exit 3\"]\n"
            "health:\n  progress_pattern: \"^step (\\\\d+)\"\n"
            "restart:\n  crash_loop: {failures: 1, window: 10m}\n"
            "telemetry:\n  state_dir: ./state\n");
  for (int run = 0; run < 5; ++run) {
    std::string out;
    EXPECT_EQ(RunSpotvisor({"run", "--config", (dir / "job.yaml").string()}, &out), 1) << out;
    const auto ended = out.find("event=attempt_ended");
    ASSERT_NE(ended, std::string::npos) << out;
    EXPECT_LT(out.find("last-line"), ended) << out.substr(ended > 2000 ? ended - 2000 : 0);
    EXPECT_LT(out.find("last-words"), ended) << out.substr(ended > 2000 ? ended - 2000 : 0);
    std::filesystem::remove_all(dir / "state");
  }
}

TEST(Run, CrashRestartsWithTheNewestCheckpointsResumeArgs) {
  TempDir dir;
  testing::WriteValidCheckpoint(dir / "ckpt" / "ckpt_step5");
  testing::WriteValidCheckpoint(dir / "ckpt" / "ckpt_step0012");
  std::filesystem::create_directories(dir / "ckpt" / ".tmp-ckpt_step99");
  std::filesystem::create_directories(dir / "ckpt" / "ckpt_step77.tmp");
  std::string out;
  EXPECT_EQ(RunSpotvisor({"run", "--config", WriteJob(dir, "--mode=exit --code=3 --fail-attempts=1")}, &out), 0) << out;
  const auto lines = ReadLines(dir / "record.txt");
  ASSERT_EQ(lines.size(), 2u) << out;
  const std::string expected = (dir / "ckpt" / "ckpt_step0012").string();
  EXPECT_NE(Field(lines[1], "argv").find("--resume_from=" + expected + "|--step=12"), std::string::npos) << lines[1];
  EXPECT_EQ(Field(lines[1], "SPOTVISOR_RESUME_FROM"), expected);
  EXPECT_EQ(Field(lines[1], "SPOTVISOR_RESUME_STEP"), "12");
  EXPECT_EQ(Field(lines[1], "SPOTVISOR_ATTEMPT"), "2");
  EXPECT_EQ(Field(lines[1], "SPOTVISOR_RESTART_COUNT"), "1");
  // A single node is rank 0 of 1; every start is a new epoch.
  EXPECT_EQ(Field(lines[0], "SPOTVISOR_NODE_RANK"), "0");
  EXPECT_EQ(Field(lines[0], "SPOTVISOR_NNODES"), "1");
  EXPECT_EQ(Field(lines[0], "SPOTVISOR_EPOCH"), "1");
  EXPECT_EQ(Field(lines[1], "SPOTVISOR_EPOCH"), "2");
  EXPECT_NE(out.find("outcome=failed"), std::string::npos) << out;
  // The journal recorded both attempts.
  const auto attempts = ReadLines(dir / "state" / "attempts.jsonl");
  ASSERT_EQ(attempts.size(), 2u);
  EXPECT_NE(attempts[0].find("\"exit_code\":3"), std::string::npos) << attempts[0];
  EXPECT_NE(attempts[1].find("\"resume_step\":12"), std::string::npos) << attempts[1];
}

TEST(Run, CommandLineFormWithoutAJobFile) {
  TempDir dir;
  testing::WriteValidCheckpoint(dir / "ck" / "ckpt_step3");
  std::string out;
  const int code = RunSpotvisor({"run", "--checkpoint-dir", (dir / "ck").string(), "--pattern", "ckpt_step{step}",
                                 "--resume-arg=--resume_from={checkpoint}", "--state-dir", (dir / "st").string(), "--",
                                 SPOTVISOR_CHILD_HELPER, "--mode=exit", "--record=" + (dir / "r.txt").string()},
                                &out);
  EXPECT_EQ(code, 0) << out;
  const auto lines = ReadLines(dir / "r.txt");
  ASSERT_EQ(lines.size(), 1u);
  EXPECT_NE(Field(lines[0], "argv").find("--resume_from=" + (dir / "ck" / "ckpt_step3").string()), std::string::npos);
}

TEST(Run, SigtermForwardsThenExits75) {
  TempDir dir;
  const auto job =
      WriteJob(dir, "--mode=checkpoint --ckpt-dir=" + (dir / "ckpt").string() + " --ready=" + (dir / "ready").string());
  auto sv = Spawn({SPOTVISOR_BINARY, "run", "--config", job}, dir / "out.txt");
  ASSERT_TRUE(WaitUntil([&] { return std::filesystem::exists(dir / "ready"); })) << ReadFile(dir / "out.txt");
  const pid_t child = ReadPid(dir / "ready");
  kill(sv.pid, SIGUSR1);  // forwarded as signals.checkpoint: the helper writes a checkpoint and goes on
  ASSERT_TRUE(WaitUntil([&] {
    for (const auto& e : std::filesystem::directory_iterator(dir / "ckpt")) {
      if (e.path().filename().string().rfind("ckpt_step", 0) == 0) return true;
    }
    return false;
  })) << ReadFile(dir / "out.txt");
  EXPECT_TRUE(ProcessAlive(child));
  kill(sv.pid, SIGTERM);
  EXPECT_EQ(WaitExit(sv.pid), 75) << ReadFile(dir / "out.txt");
  EXPECT_FALSE(ProcessAlive(child));
  EXPECT_NE(ReadFile(dir / "out.txt").find("event=signal_sent signal=SIGTERM target=group"), std::string::npos);
}

TEST(Run, IgnoredSigtermIsFollowedBySigkillAfterGrace) {
  TempDir dir;
  const auto job = WriteJob(dir, "--mode=ignore-term --ready=" + (dir / "ready").string(), "");
  // grace 2s comes from the job; a flag overrides it to 300ms.
  auto sv = Spawn({SPOTVISOR_BINARY, "run", "--config", job, "--grace", "300ms"}, dir / "out.txt");
  ASSERT_TRUE(WaitUntil([&] { return std::filesystem::exists(dir / "ready"); }));
  const pid_t child = ReadPid(dir / "ready");
  const auto start = std::chrono::steady_clock::now();
  kill(sv.pid, SIGINT);
  EXPECT_EQ(WaitExit(sv.pid), 75) << ReadFile(dir / "out.txt");
  EXPECT_GE(std::chrono::steady_clock::now() - start, 290ms);
  EXPECT_FALSE(ProcessAlive(child));
  const std::string out = ReadFile(dir / "out.txt");
  EXPECT_NE(out.find("event=grace_expired"), std::string::npos) << out;
  // The SIGKILL line says what the trainer was doing: pid, command name, state (sleeping).
  EXPECT_NE(out.find("signal=SIGKILL target=group pid=" + std::to_string(child) + " processes=1 states=\"" +
                     std::to_string(child) + " spotvisor_child S"),
            std::string::npos)
      << out;
}

// A notice (here from `provider.kind: file`, a real watcher polling a real file) caps the
// grace at deadline − now − safety margin, drains the trainer without using a budget, and
// when the notice clears while the machine lives on, the trainer resumes from the
// checkpoint it wrote in the window, then finishes: exit 0.
TEST(Run, NoticeCapsTheGraceDrainsAndResumesWhenItClears) {
  TempDir dir;
  std::string yaml = JobYaml(dir,
                             "--mode=checkpoint --sleep-ms=3000 --ckpt-dir=" + (dir / "ckpt").string() +
                                 " --ready=" + (dir / "ready").string(),
                             "provider:\n  kind: file\n  file: ./notice\n  poll_interval: 50ms\n"
                             "  safety_margin: 1s\n  min_grace: 1s\n  resume_after: 300ms\n");
  yaml.insert(yaml.find("signals:"), "  format: any\n");  // the helper's checkpoints are plain files
  WriteFile(dir / "job.yaml", yaml);
  const auto job = (dir / "job.yaml").string();
  auto sv = Spawn({SPOTVISOR_BINARY, "run", "--config", job, "--grace", "60s"}, dir / "out.txt");
  ASSERT_TRUE(WaitUntil([&] { return std::filesystem::exists(dir / "ready"); })) << ReadFile(dir / "out.txt");
  const pid_t first = ReadPid(dir / "ready");
  std::filesystem::remove(dir / "ready");
  const auto deadline = std::chrono::system_clock::now() + 4s;
  const std::time_t t = std::chrono::system_clock::to_time_t(deadline);
  char iso[32];
  std::strftime(iso, sizeof iso, "%Y-%m-%dT%H:%M:%SZ", std::gmtime(&t));
  WriteFile(dir / "notice", std::string("{\"deadline\": \"") + iso + "\", \"kind\": \"drill\"}");
  ASSERT_TRUE(WaitUntil([&] { return ReadFile(dir / "out.txt").find("event=drained") != std::string::npos; }))
      << ReadFile(dir / "out.txt");
  const std::string drained = ReadFile(dir / "out.txt");
  // 60 s of grace asked for; the deadline (≤ 4 s away, whole seconds) less the 1 s margin wins.
  const auto at = drained.find("event=stopping reason=notice");
  ASSERT_NE(at, std::string::npos) << drained;
  const std::string key = " grace=";
  const auto from = drained.find(key, at) + key.size();
  const std::string grace = drained.substr(from, drained.find_first_of(" \n", from) - from);
  const auto parsed = ParseDuration(grace);
  ASSERT_TRUE(parsed.ok()) << grace;
  EXPECT_LE(*parsed, 3s) << "grace=" << grace;
  EXPECT_GT(*parsed, 0ms) << "grace=" << grace;
  EXPECT_FALSE(ProcessAlive(first));

  std::filesystem::remove(dir / "notice");  // the notice clears; the machine lives on
  ASSERT_TRUE(WaitUntil([&] { return std::filesystem::exists(dir / "ready"); })) << ReadFile(dir / "out.txt");
  EXPECT_EQ(WaitExit(sv.pid), 0) << ReadFile(dir / "out.txt");
  const std::string out = ReadFile(dir / "out.txt");
  EXPECT_NE(out.find("event=resume_after_notice"), std::string::npos) << out;
  const auto lines = ReadLines(dir / "record.txt");
  ASSERT_EQ(lines.size(), 2u) << out;
  EXPECT_NE(Field(lines[1], "SPOTVISOR_RESUME_FROM"), "") << lines[1];
  EXPECT_EQ(Field(lines[1], "SPOTVISOR_RESTART_COUNT"), "1") << lines[1];
  const std::string state = ReadFile(dir / "state" / "state.json");
  EXPECT_NE(state.find("\"failures\": 0"), std::string::npos) << state;  // preemptions use no budget
  EXPECT_NE(state.find("\"preemptions\": 1"), std::string::npos) << state;
}

// `spotvisor run ... | head` and a log collector that dies: our stdout/stderr is a pipe
// nobody reads. Writes fail (EPIPE); the supervisor and its trainer carry on to the end.
TEST(Run, AClosedOutputPipeDoesNotKillTheSupervisor) {
  TempDir dir;
  const auto job =
      WriteJob(dir, "--mode=exit --sleep-ms=200", "health:\n  progress_pattern: \"^step\"\n  hang_timeout: 1m\n");
  int fds[2];
  ASSERT_EQ(pipe(fds), 0);
  close(fds[0]);  // nobody will ever read
  const pid_t pid = fork();
  if (pid == 0) {
    dup2(fds[1], STDOUT_FILENO);
    dup2(fds[1], STDERR_FILENO);
    execl(SPOTVISOR_BINARY, SPOTVISOR_BINARY, "run", "--config", job.c_str(), static_cast<char*>(nullptr));
    _exit(127);
  }
  close(fds[1]);
  EXPECT_EQ(WaitExit(pid), 0) << "killed by a signal shows as 128+N";
  EXPECT_EQ(ReadLines(dir / "record.txt").size(), 1u);
}

TEST(Run, SecondSigintSkipsTheGrace) {
  TempDir dir;
  const auto job = WriteJob(dir, "--mode=ignore-term --ready=" + (dir / "ready").string());
  auto sv = Spawn({SPOTVISOR_BINARY, "run", "--config", job, "--grace", "60s"}, dir / "out.txt");
  ASSERT_TRUE(WaitUntil([&] { return std::filesystem::exists(dir / "ready"); }));
  kill(sv.pid, SIGINT);
  ASSERT_TRUE(WaitUntil([&] { return ReadFile(dir / "out.txt").find("event=stopping") != std::string::npos; }));
  kill(sv.pid, SIGINT);
  EXPECT_EQ(WaitExit(sv.pid, 10s), 75) << ReadFile(dir / "out.txt");
  EXPECT_NE(ReadFile(dir / "out.txt").find("event=stop_escalated"), std::string::npos);
}

TEST(Run, GrandchildrenThatIgnoreSigtermAreGoneAndReaped) {
  TempDir dir;
  const auto job = WriteJob(dir, "--mode=grandchildren --grandchildren=3 --pids=" + (dir / "pids").string() +
                                     " --ready=" + (dir / "ready").string());
  auto sv = Spawn({SPOTVISOR_BINARY, "run", "--config", job, "--grace", "200ms"}, dir / "out.txt");
  ASSERT_TRUE(WaitUntil([&] { return std::filesystem::exists(dir / "ready"); }));
  std::vector<pid_t> pids;
  for (const auto& line : ReadLines(dir / "pids")) pids.push_back(std::stoi(line));
  ASSERT_EQ(pids.size(), 3u);
  kill(sv.pid, SIGTERM);
  EXPECT_EQ(WaitExit(sv.pid), 75) << ReadFile(dir / "out.txt");
  for (pid_t p : pids) EXPECT_FALSE(ProcessAlive(p)) << p;
  // Not even zombies: /proc/<pid> is gone once reaped.
  for (pid_t p : pids) EXPECT_FALSE(std::filesystem::exists("/proc/" + std::to_string(p))) << p;
}

TEST(Run, LeftoverGrandchildrenAreKilledBeforeARestart) {
  TempDir dir;
  // The helper exits 1 at once on attempt 1 (leaving grandchildren), then 0.
  const auto job =
      WriteJob(dir, "--mode=grandchildren --grandchildren=2 --sleep-ms=50 --code=1 --pids=" + (dir / "pids").string());
  std::string out;
  // grandchildren mode exits with --code each time: allow one failure, then the budget ends it.
  const int code = RunSpotvisor({"run", "--config", job, "--max-restarts", "0"}, &out);
  EXPECT_EQ(code, 1) << out;
  for (const auto& line : ReadLines(dir / "pids")) EXPECT_FALSE(ProcessAlive(std::stoi(line))) << line;
  EXPECT_NE(out.find("event=group_leftovers"), std::string::npos) << out;
}

TEST(Run, CrashLoopGivesUpWithCode1AndSaysWhy) {
  TempDir dir;
  std::string yaml = JobYaml(dir, "--mode=exit --code=2");
  yaml.replace(yaml.find("restart:\n"), 9,
               "restart:\n  crash_loop: {failures: 4, window: 1m}\n  no_progress_limit: 0\n");
  WriteFile(dir / "job.yaml", yaml);
  std::string out;
  EXPECT_EQ(RunSpotvisor({"run", "--config", (dir / "job.yaml").string()}, &out), 1) << out;
  EXPECT_NE(out.find("crash loop, 4 failures within 1m"), std::string::npos) << out;
  EXPECT_EQ(ReadLines(dir / "record.txt").size(), 4u);
}

TEST(Run, KilledByASignalCountsAsAFailure) {
  TempDir dir;
  std::string out;
  EXPECT_EQ(RunSpotvisor({"run", "--config", WriteJob(dir, "--mode=signal --signal=11"), "--max-restarts", "1"}, &out),
            1)
      << out;
  EXPECT_NE(out.find("killed by 11"), std::string::npos) << out;
  EXPECT_EQ(ReadLines(dir / "record.txt").size(), 2u);
}

TEST(Run, SecondSupervisorOnTheSameJobIsRefusedWith73) {
  TempDir dir;
  const auto job = WriteJob(dir, "--mode=sleep --ready=" + (dir / "ready").string());
  auto first = Spawn({SPOTVISOR_BINARY, "run", "--config", job}, dir / "out1.txt");
  ASSERT_TRUE(WaitUntil([&] { return std::filesystem::exists(dir / "ready"); }));
  std::string out;
  EXPECT_EQ(RunSpotvisor({"run", "--config", job}, &out), 73) << out;
  EXPECT_NE(out.find("already running this job"), std::string::npos) << out;
  EXPECT_NE(out.find("pid " + std::to_string(first.pid)), std::string::npos) << out;
  kill(first.pid, SIGTERM);
  EXPECT_EQ(WaitExit(first.pid), 75);
}

TEST(Run, SigkilledSupervisorTakesItsChildAlongAndTheNextRunStopsLeftovers) {
  TempDir dir;
  const auto job = WriteJob(dir, "--mode=grandchildren --grandchildren=2 --pids=" + (dir / "pids").string() +
                                     " --ready=" + (dir / "ready").string());
  auto sv = Spawn({SPOTVISOR_BINARY, "run", "--config", job}, dir / "out1.txt");
  ASSERT_TRUE(WaitUntil([&] { return std::filesystem::exists(dir / "ready"); }));
  const pid_t child = ReadPid(dir / "ready");
  std::vector<pid_t> grandchildren;
  for (const auto& line : ReadLines(dir / "pids")) grandchildren.push_back(std::stoi(line));
  kill(sv.pid, SIGKILL);
  WaitExit(sv.pid);
  EXPECT_TRUE(WaitUntil([&] { return !ProcessAlive(child); })) << "PDEATHSIG did not take the child";
  for (pid_t p : grandchildren) EXPECT_TRUE(ProcessAlive(p)) << "grandchildren ignore SIGTERM and outlive the child";
  // The next supervisor finds the leftovers, stops them, then runs attempt 2.
  std::filesystem::remove(dir / "ready");
  WriteFile(dir / "job.yaml", JobYaml(dir, "--mode=exit --code=0"));
  std::string out;
  EXPECT_EQ(RunSpotvisor({"run", "--config", job, "--grace", "200ms"}, &out), 0) << out;
  EXPECT_NE(out.find("event=leftover_found"), std::string::npos) << out;
  for (pid_t p : grandchildren) EXPECT_TRUE(WaitUntil([&] { return !ProcessAlive(p); }, 2s)) << p;
  const auto lines = ReadLines(dir / "record.txt");
  ASSERT_EQ(lines.size(), 2u);
  EXPECT_EQ(Field(lines[1], "SPOTVISOR_ATTEMPT"), "2");  // the journal survived the SIGKILL
}

TEST(Run, JournalCarriesBudgetsAcrossSupervisors) {
  TempDir dir;
  const auto job = WriteJob(dir, "--mode=exit --code=5", "");
  std::string out;
  EXPECT_EQ(RunSpotvisor({"run", "--config", job, "--max-restarts", "2"}, &out), 1) << out;
  EXPECT_EQ(ReadLines(dir / "record.txt").size(), 3u);
  // A new supervisor continues from the journal: the budget is already spent.
  EXPECT_EQ(RunSpotvisor({"run", "--config", job, "--max-restarts", "3"}, &out), 1) << out;
  EXPECT_EQ(ReadLines(dir / "record.txt").size(), 4u);
  EXPECT_NE(ReadFile(dir / "state" / "state.json").find("\"failures\": 4"), std::string::npos)
      << ReadFile(dir / "state" / "state.json");
}

// A power cut can lose the last state.json (atomic, fsynced only at exit) but not the
// lines of attempts.jsonl (fsynced each): the failures they record still use the budget.
TEST(Run, AttemptsTheStateFileLostStillCount) {
  TempDir dir;
  std::filesystem::create_directories(dir / "state");
  WriteFile(dir / "state" / "attempts.jsonl",
            "{\"attempt\":1,\"started_ms\":1,\"ended_ms\":2,\"pid\":1,\"outcome\":\"failed\",\"next\":\"restart\","
            "\"exit_code\":3}\n"
            "{\"attempt\":2,\"started_ms\":3,\"ended_ms\":4,\"pid\":1,\"outcome\":\"failed\",\"next\":\"restart\","
            "\"exit_code\":3}\n");
  std::string yaml = JobYaml(dir, "--mode=exit --code=3");
  yaml.insert(yaml.find("restart:\n") + 9, "  max_restarts: 2\n");
  WriteFile(dir / "job.yaml", yaml);
  std::string out;
  EXPECT_EQ(RunSpotvisor({"run", "--config", (dir / "job.yaml").string()}, &out), 1) << out;
  const auto lines = ReadLines(dir / "record.txt");
  ASSERT_EQ(lines.size(), 1u) << "two failures were already spent\n" << out;
  EXPECT_EQ(Field(lines[0], "SPOTVISOR_ATTEMPT"), "3") << lines[0];
}

TEST(Run, ConfigErrorsExit78WithFileLineAndKey) {
  TempDir dir;
  WriteFile(dir / "job.yaml", "job:\n  command: [\"/bin/true\"]\nsignals:\n  grace: soon\n");
  std::string out;
  EXPECT_EQ(RunSpotvisor({"run", "--config", (dir / "job.yaml").string()}, &out), 78);
  EXPECT_NE(out.find("job.yaml:4: signals.grace: 'soon' is not a duration"), std::string::npos) << out;
  EXPECT_EQ(out.find("what()"), std::string::npos);
  EXPECT_EQ(RunSpotvisor({"run", "--config", (dir / "job.yaml").string(), "--grace", "never"}, &out), 78);
  EXPECT_EQ(RunSpotvisor({"run", "--state-dir", (dir / "st").string(), "--", "/nonexistent/trainer"}, &out), 78);
  EXPECT_NE(out.find("job.command: cannot run '/nonexistent/trainer'"), std::string::npos) << out;
}

// The headline command line on a spot VM watches the notice: provider.kind defaults to
// auto (DMI, no network probe); --print-config says what it found, a run says it once.
TEST(Run, ProviderAutoIsTheDefaultAndSaysWhatItFound) {
  TempDir dir;
  std::filesystem::create_directories(dir / "dmi");
  { std::ofstream(dir / "dmi" / "sys_vendor") << "Amazon EC2\n"; }
  const auto job = (dir / "job.yaml").string();
  { std::ofstream(job) << "job:\n  command: [\"/bin/true\"]\nprovider:\n  dmi_root: ./dmi\n"; }
  std::string out;
  EXPECT_EQ(RunSpotvisor({"run", "--config", job, "--print-config"}, &out), 0) << out;
  EXPECT_NE(out.find("kind: auto  # found: aws (sys_vendor='Amazon EC2')"), std::string::npos) << out;

  // No cloud: one info line (not a warning) that says provider=none and why, then the job runs.
  EXPECT_EQ(RunSpotvisor({"run", "--state-dir", (dir / "state").string(), "--", "/bin/true"}, &out), 0) << out;
  const auto at = out.find("event=provider_detected provider=none");
  ASSERT_NE(at, std::string::npos) << out;
  const auto begin = out.rfind('\n', at) + 1;
  const std::string line = out.substr(begin, out.find('\n', at) - begin);
  EXPECT_NE(line.find(" info "), std::string::npos) << line;
  EXPECT_NE(line.find("no known cloud in DMI"), std::string::npos) << line;
}

// A restore script on a fresh VM asks `latest` before the trainer is installed: only run and
// drill need job.command[0].
TEST(Run, ReadOnlyCommandsDoNotNeedTheTrainerInstalled) {
  TempDir dir;
  std::filesystem::create_directories(dir / "ckpt");
  { std::ofstream(dir / "ckpt" / "ckpt_step5") << "weights"; }
  const auto job = (dir / "job.yaml").string();
  {
    std::ofstream out(job);
    out << "job:\n  name: restore\n  command: [\"/opt/not-installed/train.py\"]\n"
           "checkpoints:\n  dir: ./ckpt\n  pattern: \"ckpt_step{step}\"\n  format: any\n"
           "telemetry:\n  state_dir: ./state\n";
  }
  std::string out;
  EXPECT_EQ(RunSpotvisor({"latest", "--config", job}, &out), 0) << out;
  EXPECT_NE(out.find("ckpt_step5"), std::string::npos) << out;
  EXPECT_EQ(RunSpotvisor({"checkpoints", "--config", job}, &out), 0) << out;
  EXPECT_EQ(RunSpotvisor({"validate", "--config", job, (dir / "ckpt" / "ckpt_step5").string()}, &out), 0) << out;
  EXPECT_EQ(RunSpotvisor({"report", "--config", job}, &out), 1) << out;  // no run recorded yet
  EXPECT_EQ(out.find("configuration error"), std::string::npos) << out;
  EXPECT_NE(RunSpotvisor({"preflight", "--config", job, "--no-endpoint", "--write-size", "1MiB"}, &out), 78) << out;
  EXPECT_EQ(out.find("configuration error"), std::string::npos) << out;
  for (const char* command : {"run", "drill"}) {
    EXPECT_EQ(RunSpotvisor({command, "--config", job}, &out), 78) << command;
    EXPECT_NE(out.find("job.command"), std::string::npos) << out;
  }
}

TEST(Run, UsageErrorsExit64) {
  std::string out;
  EXPECT_EQ(RunSpotvisor({"run", "--no-such-flag"}, &out), 64) << out;
  // An enumerated flag's value is checked like its YAML key (spdlog would read WARNING as "off").
  for (const auto& [flag, value, accepted] : std::vector<std::tuple<std::string, std::string, std::string>>{
           {"--log-level", "WARNING", "{debug,info,warning,error,critical}"},
           {"--log-format", "xml", "{text,json}"},
           {"--provider", "ec2", "{auto,aws,gcp,azure,alibaba,file,none}"},
           {"--validate", "deep", "{structure,format,full}"}}) {
    EXPECT_EQ(RunSpotvisor({"run", flag, value, "--", "/bin/true"}, &out), 64) << flag;
    EXPECT_NE(out.find(flag + ": " + value + " not in " + accepted), std::string::npos) << out;
  }
  EXPECT_EQ(RunSpotvisor({"frobnicate"}, &out), 64) << out;
  EXPECT_EQ(RunSpotvisor({"--help"}, &out), 0);
  EXPECT_NE(out.find("run"), std::string::npos);
}

TEST(Run, PrintConfigShowsTheEffectiveConfiguration) {
  TempDir dir;
  std::string out;
  EXPECT_EQ(RunSpotvisor({"run", "--config", WriteJob(dir, "--mode=exit"), "--grace", "7s", "--print-config"}, &out),
            0);
  EXPECT_NE(out.find("grace: 7s"), std::string::npos) << out;
  EXPECT_NE(out.find("pattern: ckpt_step{step}"), std::string::npos) << out;
  EXPECT_FALSE(std::filesystem::exists(dir / "record.txt"));  // nothing was run
}

// signals.target: auto, as a user types the headline command line: what it chose and why.
TEST(Run, PrintConfigSaysWhatTheSignalTargetAutoChose) {
  TempDir dir;
  std::string out;
  EXPECT_EQ(RunSpotvisor({"run", "--state-dir", (dir / "state").string(), "--print-config", "--", "/usr/bin/env",
                          "torchrun", "--nproc_per_node=8", "train.py"},
                         &out),
            0);
  EXPECT_NE(out.find("target: auto  # signals go to: workers (auto: torchrun is a launcher (argv[1] is torchrun))"),
            std::string::npos)
      << out;
  EXPECT_EQ(RunSpotvisor({"run", "--state-dir", (dir / "state").string(), "--signal-target", "workers",
                          "--print-config", "--", "/bin/true"},
                         &out),
            0);
  EXPECT_NE(out.find("target: workers  # signals go to: workers (signals.target is workers)"), std::string::npos)
      << out;
  EXPECT_EQ(RunSpotvisor({"run", "--signal-target", "launcher", "--print-config", "--", "/bin/true"}, &out), 64);
  EXPECT_NE(out.find("--signal-target: launcher not in {auto,group,main,workers}"), std::string::npos) << out;
}

}  // namespace
}  // namespace spotvisor

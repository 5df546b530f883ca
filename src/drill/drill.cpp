// `spotvisor drill`; see drill.hpp. The drill plays the cloud and the machine: it starts
// real `spotvisor run` processes on scratch copies of the job's outputs, flips the mock
// metadata server, SIGTERMs the supervisor as a shutdown would, or SIGKILLs the trainer,
// and reads what happened from the supervisor's own journal.
#include "spotvisor/drill/drill.hpp"

#include <signal.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <memory>
#include <random>

#include "spotvisor/config/name_pattern.hpp"
#include "spotvisor/drill/drill_compare.hpp"
#include "spotvisor/mock/mock_server_thread.hpp"
#include "spotvisor/process/blocking_command.hpp"
#include "spotvisor/process/child_table.hpp"
#include "spotvisor/process/process_group.hpp"
#include "spotvisor/state/journal.hpp"
#include "spotvisor/util/clock.hpp"

namespace spotvisor::drill {
namespace {

using namespace std::chrono_literals;

// One scratch job: its own checkpoints, result, state and supervisor log.
struct Lane {
  std::filesystem::path root;
  std::filesystem::path ckpt() const { return root / "ckpt"; }
  std::filesystem::path state() const { return root / "state"; }
  std::filesystem::path result() const { return root / "result.txt"; }
  std::filesystem::path log() const { return root / "supervisor.log"; }
};

using Supervisor = std::unique_ptr<process::BlockingCommand>;

// A `spotvisor run` of `lane`, its output appended to the lane's log; SIGKILLed (its group)
// once `timeout` passes or when the drill lets go of it.
Result<Supervisor> StartSupervisor(process::ChildTable& children, const DrillOptions& o, const Lane& lane,
                                   const std::vector<std::string>& extra, std::chrono::milliseconds timeout) {
  std::vector<std::string> args{o.spotvisor.string(), "run"};
  args.insert(args.end(), o.run_args.begin(), o.run_args.end());
  // A rehearsal: its own dirs and report, and neither the job's mirror (a restore would
  // resume from the real run, an upload would overwrite it), its hooks (an on_finish may
  // power off) nor its metrics port (the real run, or the other lane, holds it).
  args.insert(args.end(),
              {"--checkpoint-dir", lane.ckpt().string(), "--state-dir", lane.state().string(), "--report-path",
               (lane.root / "report.md").string(), "--no-metrics", "--no-mirror", "--no-hooks"});
  if (o.has_result_file) args.insert(args.end(), {"--result-file", lane.result().string()});
  args.insert(args.end(), extra.begin(), extra.end());
  process::CommandSpec spec;
  spec.argv = std::move(args);
  spec.workdir = std::filesystem::current_path();
  spec.timeout = timeout;
  spec.output_file = lane.log();
  spec.null_stdin = false;
  auto supervisor = std::make_unique<process::BlockingCommand>(children, spec);
  if (auto outcome = supervisor->Wait(0ms); outcome && outcome->end == process::CommandEnd::kSpawnFailed) {
    return Error{outcome->error};
  }
  return supervisor;
}

// The supervisor's exit code (128+signal when killed) once it has exited, waiting at most
// `timeout`; nullopt while it runs, or when it was SIGKILLed at its own deadline.
std::optional<int> WaitExited(process::BlockingCommand& supervisor, std::chrono::milliseconds timeout) {
  const auto outcome = supervisor.Wait(timeout);
  if (!outcome) return std::nullopt;
  if (outcome->end == process::CommandEnd::kExited) return outcome->exit_code;
  if (outcome->end == process::CommandEnd::kSignaled) return 128 + outcome->signal;
  return std::nullopt;
}

state::PersistedState ReadState(const Lane& lane) {
  auto journal = state::Journal::Open(lane.state());
  return journal ? journal->state() : state::PersistedState{};
}

Error RunFailed(const std::string& what, const Lane& lane, std::optional<int> code) {
  return Error{what + (code ? " exited with " + std::to_string(*code) : " did not finish in time") +
               "; its log: " + lane.log().string()};
}

double Seconds(Duration d) { return std::chrono::duration<double>(d).count(); }

const char* KindName(InterruptionKind kind) {
  return kind == InterruptionKind::kNotice ? "notice" : kind == InterruptionKind::kSigterm ? "sigterm" : "kill";
}

struct Injected {
  int attempt = 0;         // the attempt that was interrupted
  std::int64_t at_ms = 0;  // unix ms of the interruption
  std::string note;
};

// One drill: the two lanes, the children it starts, the clock it measures with (the
// system's: the runs are real processes), and the report it fills in.
class Drill {
 public:
  Drill(const DrillOptions& o, Clock& clock) : o_(o), clock_(clock) {}

  Result<DrillReport> Run() {
    report_.seed = o_.seed ? o_.seed : static_cast<std::uint64_t>(clock_.Now().time_since_epoch().count());
    rng_.seed(report_.seed);
    if (Status s = MakeScratch(); !s) return s.error();
    auto reference_seconds = RunReference();  // 1. The reference run, never interrupted.
    if (!reference_seconds) return reference_seconds.error();
    report_.reference_seconds = *reference_seconds;
    auto injected = RunInterrupted();  // 2. The same job, interrupted.
    if (!injected) return injected.error();
    report_.asked = o_.interruptions;
    for (const auto& inj : *injected) report_.landed += inj.attempt > 0 && inj.note.empty() ? 1 : 0;
    CostOfEach(*injected);  // 3. What each interruption cost, from the journal.
    // 4. The verdict.
    const auto cmp = o_.has_result_file ? CompareResultFiles(reference_.result(), interrupted_.result())
                                        : CompareNewestCheckpoints(reference_.ckpt(), interrupted_.ckpt(), o_.pattern);
    report_.identical = cmp.identical;
    report_.comparison = cmp.explanation;
    if (report_.identical && report_.conclusive() && !o_.keep_scratch && !o_.scratch) {
      std::error_code ec;
      std::filesystem::remove_all(report_.scratch, ec);
    }
    return report_;
  }

 private:
  Status MakeScratch() {
    if (o_.scratch) {
      report_.scratch = *o_.scratch;
    } else {
      const char* tmp = std::getenv("TMPDIR");
      std::string templ = std::string(tmp ? tmp : "/tmp") + "/spotvisor-drill-XXXXXX";
      if (mkdtemp(templ.data()) == nullptr) return Error{"cannot create a scratch dir under " + templ};
      report_.scratch = templ;
    }
    reference_ = Lane{report_.scratch / "uninterrupted"};
    interrupted_ = Lane{report_.scratch / "interrupted"};
    for (const auto& lane : {reference_, interrupted_}) {
      std::error_code ec;
      std::filesystem::remove_all(lane.root, ec);
      std::filesystem::create_directories(lane.root, ec);
      if (ec) return Error{"cannot create " + lane.root.string() + ": " + ec.message()};
    }
    return Ok{};
  }

  // The uninterrupted run: how long it took, in seconds.
  Result<double> RunReference() {
    std::printf("drill: uninterrupted run (log: %s)\n", reference_.log().c_str());
    std::fflush(stdout);
    const auto start = clock_.Now();
    auto supervisor = StartSupervisor(children_, o_, reference_, {"--provider", "none"}, 6h);
    if (!supervisor) return supervisor.error();
    const auto code = WaitExited(**supervisor, 6h);
    if (code != 0) return RunFailed("the uninterrupted run", reference_, code);
    return Seconds(std::chrono::duration_cast<Duration>(clock_.Now() - start));
  }

  // Waits until a trainer of an attempt after `after_attempt` runs. False when the supervisor exited.
  bool WaitForTrainer(process::BlockingCommand& sv, int after_attempt, Duration timeout) {
    const auto deadline = clock_.Now() + timeout;
    while (clock_.Now() < deadline) {
      const auto s = ReadState(interrupted_);
      if (s.child && s.attempts > after_attempt && s.phase == "running") return true;
      if (sv.Wait(20ms)) return false;  // ended; else a look at the journal every 20 ms
    }
    return false;
  }

  // The interrupted run: `o_.interruptions` interruptions at random moments of attempts.
  Result<std::vector<Injected>> RunInterrupted() {
    std::vector<std::string> extra{"--provider", "none"};
    if (o_.kind == InterruptionKind::kNotice) {
      auto url = mock_.Start();
      if (!url) return Error{"cannot start the mock metadata server: " + url.error().message};
      extra = {"--provider", "aws", "--endpoint", *url, "--poll-interval", "200ms"};
    }
    std::printf("drill: interrupted run, %d × %s, seed %llu (log: %s)\n", o_.interruptions, KindName(o_.kind),
                static_cast<unsigned long long>(report_.seed), interrupted_.log().c_str());
    std::fflush(stdout);
    const auto run_start = clock_.Now();
    budget_ = std::chrono::duration_cast<Duration>(std::chrono::duration<double>(report_.reference_seconds * 10 + 120));
    // Each supervisor is SIGKILLed (its group) at the latest once the whole run's waits are over.
    sv_timeout_ = budget_ * (o_.interruptions + 2);
    auto started = StartSupervisor(children_, o_, interrupted_, extra, sv_timeout_);
    if (!started) return started.error();
    Supervisor sv = std::move(*started);
    std::vector<Injected> injected;
    int last_attempt = 0;
    std::uniform_real_distribution<double> spread(0.2, 0.8);
    for (int i = 0; i < o_.interruptions && sv; ++i) {
      if (!WaitForTrainer(*sv, last_attempt, budget_)) {
        injected.push_back({0, 0, "the job finished before this interruption"});
        break;
      }
      const int attempt = ReadState(interrupted_).attempts;
      const double delay = report_.reference_seconds * spread(rng_) / o_.interruptions;
      if (auto code = WaitExited(*sv, std::chrono::duration_cast<Duration>(std::chrono::duration<double>(delay)))) {
        if (*code != 0) return RunFailed("the interrupted run", interrupted_, code);
        injected.push_back({0, 0, "the job finished before this interruption"});
        sv.reset();
        break;
      }
      auto inj = Interrupt(sv, attempt, extra);
      if (!inj) return inj.error();
      injected.push_back(*inj);
      last_attempt = attempt;
    }
    if (sv) {
      const auto code = WaitExited(*sv, budget_);
      if (code != 0) return RunFailed("the interrupted run", interrupted_, code);
    }
    report_.interrupted_seconds = Seconds(std::chrono::duration_cast<Duration>(clock_.Now() - run_start));
    return injected;
  }

  // One interruption of the running `attempt`; a stopped supervisor is followed by a fresh
  // one (in `sv`), as a replacement machine would start it. `sv` is reset when the job ended.
  Result<Injected> Interrupt(Supervisor& sv, int attempt, const std::vector<std::string>& extra) {
    Injected inj{attempt, UnixMillis(clock_.WallNow()), ""};
    if (o_.kind == InterruptionKind::kKill) {
      const auto child = ReadState(interrupted_).child;
      if (child) {
        process::SignalProcess(child->pid, SIGKILL);
      } else {
        inj.note = "no trainer ran to kill";
      }
      std::printf("drill: SIGKILL to the trainer (attempt %d)\n", attempt);
      std::fflush(stdout);
      return inj;
    }
    if (o_.kind == InterruptionKind::kNotice) {
      mock_.Preempt();
      std::printf("drill: preemption notice from the mock metadata server (attempt %d)\n", attempt);
      std::fflush(stdout);
      const auto drained_by = clock_.Now() + budget_;
      while (clock_.Now() < drained_by && ReadState(interrupted_).phase != "drained" && !sv->Wait(20ms)) {
      }
      std::printf("drill: supervisor drained; the machine goes away (SIGTERM to spotvisor)\n");
    } else {
      std::printf("drill: SIGTERM to spotvisor, as systemd sends at shutdown (attempt %d)\n", attempt);
    }
    sv->Signal(SIGTERM);
    const auto code = WaitExited(*sv, budget_);
    if (!code || (*code != o_.stop_exit_code && *code != 0))
      return RunFailed("the interrupted supervisor", interrupted_, code);
    if (o_.kind == InterruptionKind::kNotice) mock_.Clear();
    if (code == 0) {
      inj.note = "the job finished while stopping";
      sv.reset();
      return inj;
    }
    std::printf("drill: a fresh spotvisor resumes the job\n");
    std::fflush(stdout);
    auto next = StartSupervisor(children_, o_, interrupted_, extra, sv_timeout_);
    if (!next) return next.error();
    sv = std::move(*next);
    return inj;
  }

  // Each interruption's row: the step resumed from, the time to resume and the steps lost
  // (at the reference run's pace), from the interrupted run's journal.
  void CostOfEach(const std::vector<Injected>& injected) {
    auto journal = state::Journal::Open(interrupted_.state());
    const auto attempts = journal ? journal->ReadAttempts() : std::vector<state::AttemptRecord>{};
    const double pace = StepsPerSecond(reference_.ckpt(), o_.pattern, reference_.state());
    for (const auto& inj : injected) {
      InterruptionRow row;
      row.kind = KindName(o_.kind);
      row.note = inj.note;
      if (inj.attempt > 0) {
        std::int64_t interrupted_start_ms = inj.at_ms;
        for (const auto& a : attempts) {
          if (a.attempt == inj.attempt) interrupted_start_ms = a.started_ms;
        }
        for (const auto& a : attempts) {
          if (a.attempt != inj.attempt + 1) continue;
          row.resumed_from = a.resume_step.value_or(0);
          row.seconds_to_resume = (a.started_ms - inj.at_ms) / 1000.0;
          const auto written_ms = a.resume_from ? CheckpointMillis(*a.resume_from) : std::optional<std::int64_t>{};
          if (pace > 0) {
            const double lost_s = written_ms ? std::max<double>(0, (inj.at_ms - *written_ms) / 1000.0)
                                             : (inj.at_ms - interrupted_start_ms) / 1000.0;
            row.steps_lost = static_cast<std::uint64_t>(std::llround(lost_s * pace));
            row.step_reached = *row.resumed_from + *row.steps_lost;
          }
        }
      }
      report_.rows.push_back(row);
    }
  }

  const DrillOptions& o_;
  Clock& clock_;
  process::ChildTable children_;
  mock::MockServerThread mock_{mock::MockProvider::kAws};
  DrillReport report_;
  std::mt19937_64 rng_;
  Lane reference_, interrupted_;
  Duration budget_{0};      // the longest wait for one step of the interrupted run
  Duration sv_timeout_{0};  // each supervisor's own deadline
};

}  // namespace

Result<DrillReport> RunDrill(const DrillOptions& o) { return Drill(o, SystemClock()).Run(); }

std::string FormatReport(const DrillReport& r) {
  auto opt = [](const auto& v) { return v ? std::to_string(*v) : std::string("?"); };
  std::string out =
      "\nscratch runs: their own checkpoint dir, state dir, report and result file; the job's mirror is not used (no "
      "restore, no upload), no hook runs, and no metrics port is opened\n"
      "\n| # | interruption | step reached (≈) | resumed from step | steps lost (≈) | time to resume |\n"
      "|---|---|---|---|---|---|\n";
  for (std::size_t i = 0; i < r.rows.size(); ++i) {
    const auto& row = r.rows[i];
    char resume[32] = "?";
    if (row.seconds_to_resume) std::snprintf(resume, sizeof resume, "%.2f s", *row.seconds_to_resume);
    out += "| " + std::to_string(i + 1) + " | " + row.kind + " | " + opt(row.step_reached) + " | " +
           opt(row.resumed_from) + " | " + opt(row.steps_lost) + " | " + resume + " |" +
           (row.note.empty() ? "" : " " + row.note) + "\n";
  }
  char times[160];
  std::snprintf(times, sizeof times, "\nuninterrupted %.1f s, interrupted %.1f s, seed %llu\n", r.reference_seconds,
                r.interrupted_seconds, static_cast<unsigned long long>(r.seed));
  out += times;
  out += r.comparison + "\n";
  if (!r.identical || std::filesystem::exists(r.scratch)) out += "scratch: " + r.scratch.string() + "\n";
  if (!r.conclusive()) {
    out += std::to_string(r.landed) + " of " + std::to_string(r.asked) +
           " interruptions landed: the comparison proves nothing about resuming (fewer --interruptions, or a "
           "longer job)\ninconclusive\n";
    return out;
  }
  out += r.identical ? "identical\n" : "differ\n";
  return out;
}

}  // namespace spotvisor::drill

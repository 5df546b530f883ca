// `spotvisor drill`: proves exact resume on a user's own job. It runs the job once
// uninterrupted and once with interruptions injected at random moments (a preemption
// notice through the built-in mock metadata server, a SIGTERM to the supervisor as systemd
// sends at shutdown, or a SIGKILL of the trainer), each in its own scratch checkpoint dir,
// result file and state dir, then compares the results. Runs the real `spotvisor run` as
// child processes; blocking, on the calling thread (the mock server gets its own thread).
#pragma once

#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include "spotvisor/util/result.hpp"

namespace spotvisor::drill {

enum class InterruptionKind { kNotice, kSigterm, kKill };

struct DrillOptions {
  std::filesystem::path spotvisor;    // the binary to run (normally /proc/self/exe)
  std::vector<std::string> run_args;  // how to read the job: --config FILE, overrides
  int interruptions = 2;
  InterruptionKind kind = InterruptionKind::kNotice;
  std::uint64_t seed = 0;                        // 0: from the clock; printed for reruns
  std::optional<std::filesystem::path> scratch;  // default: a new dir under $TMPDIR
  bool keep_scratch = false;                     // default: removed when identical
  bool has_result_file = false;                  // the job declares job.result_file
  std::string pattern;                           // checkpoints.pattern of the job
  int stop_exit_code = 75;                       // job.stop_exit_code: what an interrupted run exits with
};

// One injected interruption and what it cost.
struct InterruptionRow {
  std::string kind;                           // notice | sigterm | kill
  std::optional<std::uint64_t> step_reached;  // ≈ from the reference run's pace
  std::optional<std::uint64_t> resumed_from;  // the step the next attempt resumed from
  std::optional<std::uint64_t> steps_lost;
  std::optional<double> seconds_to_resume;  // interruption → the next trainer started
  std::string note;                         // e.g. "the job finished before it fired"
};

struct DrillReport {
  std::vector<InterruptionRow> rows;
  bool identical = false;
  int landed = 0;                                      // interruptions that really interrupted a running trainer
  int asked = 0;                                       // interruptions asked for
  bool conclusive() const { return landed == asked; }  // else the comparison proves nothing
  std::string comparison;                              // what was compared, and where they differ
  double reference_seconds = 0;
  double interrupted_seconds = 0;
  std::filesystem::path scratch;
  std::uint64_t seed = 0;
};

// Runs both jobs. An Error when a run itself failed (it names the run and its log).
Result<DrillReport> RunDrill(const DrillOptions& options);

// The verdict table for people; its last line is `identical`, `differ` or `inconclusive`
// (an interruption did not land). The scratch runs never touch the job's mirror, never run
// its hooks (`run --no-mirror --no-hooks`), and the table says so.
std::string FormatReport(const DrillReport& report);

}  // namespace spotvisor::drill

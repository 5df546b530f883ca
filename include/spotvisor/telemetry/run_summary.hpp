// The numbers of a run, computed from the ledger and the journal's attempts: billed time,
// work done and lost, throughput, goodput, checkpoint overhead, cost. One function serves
// the live metrics and the report, so both always agree. Pure; any thread.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "spotvisor/cost/cost_model.hpp"
#include "spotvisor/state/journal.hpp"
#include "spotvisor/telemetry/run_ledger.hpp"

namespace spotvisor::telemetry {

// The billed time split so that the parts add up to it (seconds); see goodput_buckets.hpp.
struct GoodputBuckets {
  double productive = 0;     // training whose progress was kept
  double lost = 0;           // training after the last kept checkpoint of an interrupted attempt
  double checkpointing = 0;  // measured checkpoint write time
  double startup = 0;        // start to first progress
  double disrupted = 0;      // notice or crash to the next start
  double waiting = 0;        // a multi-node group waiting for its members
  double idle = 0;           // the rest of the billed time
  double Sum() const;
  GoodputBuckets& operator+=(const GoodputBuckets& o) {
    productive += o.productive, lost += o.lost, checkpointing += o.checkpointing, startup += o.startup;
    disrupted += o.disrupted, waiting += o.waiting, idle += o.idle;
    return *this;
  }
};

struct AttemptSummary {
  state::AttemptRecord record;  // as journaled (ended_ms = now while running)
  bool running = false;
  std::optional<std::uint64_t> reached_step;   // newest good checkpoint written during it
  double trainer_seconds = 0;                  // its duration
  double lost_seconds = 0;                     // from its last checkpoint (or start) to its end; 0 when done
  std::uint64_t steps_lost_measured = 0;       // reached but not resumed from (a corrupt newest one)
  std::optional<double> steps_lost_estimated;  // lost_seconds x throughput
  GoodputBuckets buckets;                      // its own time; the gap after it is the run's
};

struct RunSummary {
  std::int64_t first_start_ms = 0, last_end_ms = 0;
  double billed_hours = 0;                  // machine time billed (sessions; boot when configured)
  double calendar_hours = 0;                // first start to last end
  double trainer_seconds = 0;               // sum of attempt durations
  int attempt_count = 0;                    // folded + listed
  std::vector<AttemptSummary> attempts;     // the attempts not folded, oldest first
  std::map<std::string, int> restarts;      // by the outcome that led to the restart
  std::uint64_t initial_step = 0;           // where this run started (0 = fresh)
  std::optional<std::uint64_t> final_step;  // newest good checkpoint
  std::uint64_t steps_done = 0;             // final - initial: durable work of this run
  std::optional<double> steps_per_second;   // between checkpoints of one attempt
  double lost_seconds = 0;
  std::uint64_t steps_lost_measured = 0;
  std::optional<double> steps_lost_estimated;
  std::optional<double> checkpoint_write_seconds;  // sum of measured write times
  std::optional<double> checkpoint_overhead;       // write time / trainer time (0..1)
  std::optional<double> goodput;                   // useful trainer time / billed time (0..1)
  double billed_seconds = 0;                       // billed_hours in seconds: the buckets' sum
  GoodputBuckets buckets;
  cost::Estimate cost;
  std::optional<std::pair<double, double>> cost_per_1000_steps;
};

// Ended attempts summed into totals. A long-lived supervisor keeps only its newest attempts
// as records and folds the older ones here, so its memory and the cost of one summary stay
// flat however often the trainer restarts (the journal on disk keeps every attempt).
struct FoldedAttempts {
  int count = 0;
  std::optional<std::uint64_t> first_resume_step;  // of the very first attempt
  std::optional<std::uint64_t> newest_step;        // highest resumed or reached step
  double trainer_seconds = 0;
  double lost_seconds = 0;
  std::uint64_t steps_lost_measured = 0;
  std::map<std::string, int> restarts;  // every folded attempt was followed by one
  GoodputBuckets buckets;               // their own time and the disrupted gaps after them
};

// Folds the oldest of `attempts` into `folded` until `keep` (at least 1) remain. Checkpoints
// of a folded attempt must already be in the ledger: fold only attempts that have ended.
void FoldOldest(const RunLedger& ledger, std::vector<state::AttemptRecord>& attempts, FoldedAttempts& folded,
                std::size_t keep);

// `now_ms` ends the open session and a running attempt (`running`, if any). `attempts`
// follow the ones in `folded`.
RunSummary Summarize(const RunLedger& ledger, const std::vector<state::AttemptRecord>& attempts, std::int64_t now_ms,
                     const std::optional<state::AttemptRecord>& running = std::nullopt,
                     const FoldedAttempts& folded = {});

}  // namespace spotvisor::telemetry

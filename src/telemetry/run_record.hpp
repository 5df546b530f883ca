// The run record while a run goes on: run.json (RunLedger) plus the journal's ended
// attempts, loaded at start, summarised for the metrics, the status line and the budget,
// and saved after every change (a failing save said once, its recovery once). Also what
// the metadata service tells about the instance. Wall times (sessions, summaries) are the
// run clock's. io thread only.
#pragma once

#include <optional>
#include <vector>

#include "spotvisor/config/job_config.hpp"
#include "spotvisor/preemption/instance_facts.hpp"
#include "spotvisor/state/journal.hpp"
#include "spotvisor/telemetry/run_ledger.hpp"
#include "spotvisor/telemetry/run_summary.hpp"
#include "spotvisor/util/clock.hpp"

namespace spotvisor::telemetry {

class RunRecord {
 public:
  // `job` and `clock` outlive the record.
  RunRecord(const config::JobConfig& job, Clock& clock) : job_(job), clock_(clock) {}

  // Reads run.json (a corrupt one is moved aside) and the journal's attempts, stamps this
  // job's facts and opens a new machine session; saves.
  void Load();
  void Save();

  RunLedger& ledger() { return ledger_; }
  const RunLedger& ledger() const { return ledger_; }
  int last_attempt() const { return last_attempt_; }

  void AttemptStarted(int attempt) { last_attempt_ = attempt; }
  void AttemptEnded(const state::AttemptRecord& record);
  // The summary now, the attempt in progress included.
  RunSummary Summary(const std::optional<state::AttemptRecord>& current) const;
  // Instance type, zone and region from the metadata service (DMI knows only some of it).
  void AddInstanceFacts(const preemption::InstanceFacts& facts);

 private:
  const config::JobConfig& job_;                // not owned
  Clock& clock_;                                // not owned
  RunLedger ledger_;                            // run.json
  std::vector<state::AttemptRecord> attempts_;  // the newest ended attempts (journal)
  FoldedAttempts folded_;                       // the older ones, summed
  int last_attempt_ = 0;                        // the newest attempt number seen
  bool save_failed_ = false;                    // said once
};

}  // namespace spotvisor::telemetry

// `<state_dir>/checkpoints.jsonl`: one JSON line per checkpoint spotvisor saw appear (its
// size and, when spotvisor asked for it, its cost: request → new good checkpoint), per
// request that went unanswered, and per change of the adaptive interval. The run report
// and `spotvisor preflight` (last checkpoint size) read it. Blocking file I/O: call from
// a worker thread, never the io thread.
#pragma once

#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include "spotvisor/util/result.hpp"

namespace spotvisor::cadence {

inline constexpr std::string_view kCheckpointJournalName = "checkpoints.jsonl";

struct CheckpointRecord {
  std::int64_t at_ms = 0;                    // unix ms when it was recorded
  std::string event;                         // checkpoint | unanswered | interval
  std::string reason;                        // cadence | adaptive | notice aws rebalance | trainer
  int attempt = 0;                           // the trainer attempt it belongs to
  std::string path;                          // checkpoint: where it is
  std::optional<std::uint64_t> step;         // checkpoint: its step
  std::optional<std::uint64_t> size_bytes;   // checkpoint: all its files together
  std::optional<std::int64_t> cost_ms;       // requested checkpoint: request → good checkpoint
  std::optional<std::int64_t> waited_ms;     // unanswered: how long we waited
  std::optional<std::int64_t> interval_ms;   // the interval in force afterwards
  std::optional<std::int64_t> c_ms;          // the blocking cost C in use
  std::optional<std::int64_t> m_ms;          // the mean time between interruptions M in use
  std::optional<double> overhead_pct;        // measured checkpoint cost / trainer run time
  std::optional<double> expected_waste_pct;  // sqrt(2C/M) at the current C and M
};

// Appends one line and fdatasyncs it. The Error names the file.
Status AppendCheckpointRecord(const std::filesystem::path& state_dir, const CheckpointRecord& record);

// Every record so far (a torn last line is skipped); empty when there is no file.
std::vector<CheckpointRecord> ReadCheckpointRecords(const std::filesystem::path& state_dir);

}  // namespace spotvisor::cadence

// The job's memory on disk, in telemetry.state_dir: `state.json` (counters and the current
// child, replaced atomically at every change, fsynced at exit) and `attempts.jsonl` (one
// line per finished attempt, appended and fsynced: the durable record). A restarted supervisor — after a reboot, a VM
// stop/start or a SIGKILL — continues the attempt count and the budgets from here. io thread only.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include "spotvisor/process/process_group.hpp"
#include "spotvisor/util/atomic_file.hpp"
#include "spotvisor/util/result.hpp"

namespace spotvisor::state {

// Counters with wall-clock times, so they mean something after a reboot.
struct PersistedState {
  std::string job;
  int attempts = 0;
  int failures = 0;
  int hangs = 0;
  int preemptions = 0;
  int consecutive_failures = 0;
  int no_progress_streak = 0;
  std::optional<std::uint64_t> last_resume_step;
  // The newest start's epoch and the step it started from (0: fresh), on disk from the
  // spawn on: fencing knows of an epoch whose attempt has no record yet (still running, or
  // its supervisor was SIGKILLed).
  std::optional<std::uint64_t> last_epoch;
  std::uint64_t last_epoch_step = 0;
  std::vector<std::int64_t> recent_failures_ms;  // unix ms, within the crash-loop window
  std::optional<process::ChildIdentity> child;   // the running child, if any
  std::string phase;                             // last known phase, for people
  std::string last_exit_message;                 // why the last supervisor exited
};

struct AttemptRecord {
  int attempt = 0;
  std::int64_t started_ms = 0;  // unix ms
  std::int64_t ended_ms = 0;
  pid_t pid = 0;
  std::optional<std::string> resume_from;
  std::optional<std::uint64_t> resume_step;
  std::optional<int> exit_code;
  std::optional<int> signal;
  std::string outcome;  // done | failed | stopped | preempted | hang | budget | spawn-failed | peer-stopped
  std::string next;     // what the supervisor did about it
  std::optional<int> slurm_restart_count;  // SLURM_RESTART_COUNT under SLURM (0 before a requeue)
  std::optional<std::string> stopped_by;   // peer-stopped: the node that stopped the group, and why
  std::optional<std::uint64_t> epoch;      // the group start it belonged to (a single node: the attempt)
  std::optional<int> nodes;                // the group's size in that start (1: a single node)
};

// Every attempt recorded in `state_dir`'s attempts.jsonl (none: no file); a torn last line
// (power cut mid-append) is skipped. Reads only: for tools beside a running supervisor.
std::vector<AttemptRecord> ReadAttemptRecords(const std::filesystem::path& state_dir);

class Journal {
 public:
  // Reads what a previous supervisor left (nothing is fine). A corrupt state.json is an
  // Error naming it: we never guess budgets.
  static Result<Journal> Open(const std::filesystem::path& state_dir);

  const PersistedState& state() const { return state_; }
  // Replaces state.json atomically; `durability` kDurable also fsyncs it (at exit).
  Status Save(const PersistedState& state, Durability durability = Durability::kDurable);
  // Appends the record; one that cannot be written (state dir full or unwritable) is kept
  // and appended, in order, before the next one or at FlushAttempts — never lost.
  Status AppendAttempt(const AttemptRecord& record);
  Status FlushAttempts();
  std::size_t unwritten_attempts() const { return unwritten_.size(); }
  // Every attempt recorded so far; a torn last line (power cut mid-append) is skipped.
  std::vector<AttemptRecord> ReadAttempts() const;

  const std::filesystem::path& dir() const { return dir_; }

 private:
  explicit Journal(std::filesystem::path dir) : dir_(std::move(dir)) {}
  std::filesystem::path dir_;           // the state dir
  PersistedState state_;                // as last saved or loaded
  std::vector<std::string> unwritten_;  // attempt lines not yet on disk, oldest first
};

}  // namespace spotvisor::state

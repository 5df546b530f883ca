// What spotvisor records about a run beyond the journal: machine sessions (for billed
// time), notices, checkpoints seen and their verdicts, hooks, GPU and host facts, the cost
// prices in force. Kept in <state_dir>/run.json (replaced atomically), so that `spotvisor
// report` needs nothing but the state dir. Plain data; the owner decides the thread.
#pragma once

#include <cstdint>
#include <filesystem>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "spotvisor/config/job_config.hpp"
#include "spotvisor/util/result.hpp"

namespace spotvisor::telemetry {

inline constexpr std::string_view kLedgerFileName = "run.json";
inline constexpr std::size_t kMaxCheckpointRecords = 1000;  // older ones live on in the totals
inline constexpr std::size_t kMaxHookRecords = 200;
inline constexpr std::size_t kMaxProgressRecords = 1000;  // first progress per attempt; waiting intervals

struct SessionRecord {            // one supervisor process on one machine boot
  std::int64_t started_ms = 0;    // unix ms
  std::int64_t last_seen_ms = 0;  // refreshed while alive: the end when it was killed
  std::optional<std::int64_t> ended_ms;
  std::optional<std::int64_t> boot_ms;  // when the machine booted
  std::optional<int> exit_code;
  std::string exit_message;
  std::string hostname;
};

struct NoticeRecord {
  std::int64_t received_ms = 0;
  std::string provider, kind, action;       // action: stop | checkpoint
  std::optional<std::int64_t> deadline_ms;  // the provider's, when it gave one
  std::optional<std::int64_t> signal_ms;    // when the trainer was signalled for it
  int attempt = 0;
  // Its save (all optional: older run.json files lack them). The first checkpoint the
  // notice's attempt wrote after it (a good one replaces a corrupt one): saved = its newest
  // file's mtime, validated = when it was judged good, mirrored = its upload done.
  std::optional<std::int64_t> saved_ms, validated_ms, mirrored_ms;
  std::string checkpoint;             // its name; empty: none
  std::optional<std::uint64_t> step;  // its step
  std::string outcome;                // saved | saved-late | not-saved | no-deadline; empty: pending
  // Not saved: `checkpoint` and `step` name the newest good checkpoint (the resume's), and this
  // is the trainer's last step (health.progress_pattern's group) less that one's; none unknown.
  std::optional<std::uint64_t> steps_lost;
  // With a mirror: the planner's save + upload at the notice (ms; none before an upload was
  // measured), and the newest step on the mirror at the notice's deadline (at the run's end
  // without one): what a new VM resumes from. Older run.json files lack them.
  bool mirror = false;
  std::optional<std::int64_t> predicted_durable_ms;
  std::optional<std::uint64_t> durable_step;
};

struct Interval {  // unix ms
  std::int64_t start_ms = 0, end_ms = 0;
};

struct CheckpointRecord {
  std::string name;
  std::uint64_t step = 0;
  std::uint64_t bytes = 0;
  std::int64_t mtime_ms = 0;             // newest file
  std::optional<std::int64_t> write_ms;  // birth of the first file to mtime of the last (statx)
  bool good = false;
  std::string reason;  // the validator's verdict
  int attempt = 0;     // attempt running when it appeared (0: before this run)
  std::int64_t seen_ms = 0;
};

struct CheckpointTotals {  // all checkpoints ever seen, beyond the capped list
  int good = 0, corrupt = 0;
  std::uint64_t bytes = 0;    // sum over good ones
  std::int64_t write_ms = 0;  // sum over those with a measured write time
  int write_measured = 0;
};

struct HookRecord {
  std::string hook, outcome, message;
  std::int64_t started_ms = 0, duration_ms = 0;
};

struct GpuInfo {
  bool available = false;
  std::string reason;  // why not, when not
  std::string driver;
  std::vector<std::string> models;       // one per device
  std::uint64_t memory_total_bytes = 0;  // per device, the largest
  std::uint64_t peak_vram_bytes = 0;     // the largest used on any device
};

struct HostInfo {
  std::string hostname, provider, instance_type, zone, region;
  std::string source;  // where provider/instance type came from
};

struct Fingerprint {
  std::string path;
  std::string hash;  // "xxh3-128:<hex>"; empty with error
  std::uint64_t bytes = 0;
  std::string error;
};

struct RunLedger {
  std::string job;
  std::map<std::string, std::string> labels;
  std::string version;
  std::string config_hash;  // of the effective config (secrets redacted)
  std::vector<Fingerprint> fingerprints;
  HostInfo host;
  GpuInfo gpu;
  config::CostSection cost;  // prices in force (the latest session's)
  std::vector<SessionRecord> sessions;
  std::vector<NoticeRecord> notices;
  std::vector<CheckpointRecord> checkpoints;  // the newest kMaxCheckpointRecords
  CheckpointTotals checkpoint_totals;
  std::vector<HookRecord> hooks;             // the newest kMaxHookRecords
  std::map<std::string, int> hook_failures;  // by hook name
  std::optional<std::int64_t> budget_warned_ms, budget_exhausted_ms;
  // Goodput: where each attempt's first progress came from (heartbeat | progress_pattern |
  // first_checkpoint) and when it came; when a multi-node group waited for its members.
  std::string first_progress_from;
  std::map<int, std::int64_t> first_progress_ms;  // attempt -> unix ms, the newest kMaxProgressRecords
  std::vector<Interval> waiting;                  // the newest kMaxProgressRecords

  void AddFirstProgress(int attempt, std::int64_t ms);
  void AddWaiting(Interval interval);

  // A missing file is an empty ledger; a corrupt one is an Error naming it.
  static Result<RunLedger> Load(const std::filesystem::path& state_dir);
  Status Save(const std::filesystem::path& state_dir) const;

  void AddCheckpoint(const CheckpointRecord& record);
  void AddHook(const HookRecord& record);
};

// A notice's outcome from its record: "saved" (judged good by the deadline), "saved-late",
// "no-deadline" (judged good, the provider gave no deadline), "not-saved"; nullopt while it
// may still come (`final`: the notice's attempt is over and its last verdicts are in).
std::optional<std::string> NoticeOutcome(const NoticeRecord& notice, bool final);

}  // namespace spotvisor::telemetry

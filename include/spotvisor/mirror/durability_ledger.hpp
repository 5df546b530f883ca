// Which checkpoints outlive the machine: `<state_dir>/durability.json`, one record per
// checkpoint the mirror has handled — uploading, durable (on the mirror; restored from it
// counts), failed (with why) or superseded (a newer one took its place before it finished)
// — with its bytes and times. The mirror observer writes it at each change (upload threads
// and the keeper's, hence the lock); `spotvisor checkpoints` and `status` read it, also
// after spotvisor's own restart. At most kMaxDurabilityRecords, the newest steps kept.
#pragma once

#include <cstdint>
#include <filesystem>
#include <map>
#include <mutex>
#include <optional>
#include <string>

#include "spotvisor/util/result.hpp"

namespace spotvisor::mirror {

inline constexpr std::size_t kMaxDurabilityRecords = 256;

enum class Durability { kUploading, kDurable, kFailed, kSuperseded };
const char* ToString(Durability d);  // "uploading", "durable", "failed", "superseded"

struct DurabilityRecord {
  std::uint64_t step = 0;
  Durability state = Durability::kUploading;
  std::uint64_t bytes = 0;
  std::int64_t upload_started_ms = 0;      // unix ms
  std::optional<std::int64_t> durable_ms;  // unix ms it reached the mirror
  std::string detail;                      // failed: why; superseded: by which
};

using DurabilityRecords = std::map<std::string, DurabilityRecord>;  // by checkpoint name

class DurabilityLedger {
 public:
  explicit DurabilityLedger(std::filesystem::path state_dir);
  // Records `name`'s new state (the file is rewritten atomically); an error is logged once.
  void Set(const std::string& name, const DurabilityRecord& record);
  std::optional<DurabilityRecord> Get(const std::string& name);
  // What the file holds (empty when there is none or it cannot be read).
  static DurabilityRecords Read(const std::filesystem::path& state_dir);

 private:
  const std::filesystem::path path_;
  std::mutex mutex_;           // guards records_ and the file
  DurabilityRecords records_;  // loaded at construction
  bool warned_ = false;
};

}  // namespace spotvisor::mirror

// The question the supervisor asks before every start: which checkpoint do we resume
// from? The real answer comes from the catalog (scan, validate, quarantine); tests may
// pass their own. Called from one worker thread at a time, never from the io thread,
// because full validation reads every byte.
#pragma once

#include <cstdint>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "spotvisor/config/job_config.hpp"
#include "spotvisor/util/result.hpp"

namespace spotvisor::checkpoint {

// A checkpoint the trainer will be told to resume from.
struct ResumePoint {
  std::filesystem::path path;  // checkpoints.dir (absolute) joined with the name
  std::uint64_t step = 0;
};

// A newer checkpoint that was passed over, and why.
struct Rejection {
  std::filesystem::path path;                     // where it was found
  std::string reason;                             // what failed, naming entry/offset
  std::optional<std::filesystem::path> moved_to;  // its place in the quarantine, if moved
  bool fenced = false;  // not bad but written by an epoch the group had left (fence.hpp): never moved
};

struct Selection {
  std::optional<ResumePoint> chosen;  // none: start fresh
  // Every checkpoint known good, newest first (peers intersect them): `chosen` first,
  // validated now; then the older ones whose verdict the cache holds as good for their
  // unchanged size/mtime/inode (one never judged is left out: validating it would read
  // every byte before every start). Retention's deletions are not in it.
  std::vector<ResumePoint> good;
  std::vector<Rejection> rejected;  // newest first
  // Temp-named entries in checkpoints.dir (half-written saves a killed trainer left):
  // never used, never deleted by spotvisor, reported because they take space. Filled
  // only by a selection that acts (before a start).
  std::vector<std::filesystem::path> temp_left;  // sorted by name
  std::uint64_t temp_left_bytes = 0;
};

class ResumeSelector {
 public:
  virtual ~ResumeSelector() = default;
  // The newest good checkpoint, fully validated now whatever a cache says. An Error only
  // when the directory itself cannot be read (a bad checkpoint is a Rejection).
  virtual Result<Selection> SelectForResume() = 0;
};

// The catalog-backed selector for a job; quarantines rejected checkpoints when the
// job's config says so. Returns a selector that always answers "start fresh" when the
// job has no checkpoints.dir.
std::unique_ptr<ResumeSelector> MakeResumeSelector(const config::JobConfig& job);

// `selection.good`, or `chosen` alone for a selector that fills only that.
std::vector<ResumePoint> GoodSteps(const Selection& selection);

}  // namespace spotvisor::checkpoint

// The one owner of checkpoints.dir during `spotvisor run`: every scan, validation and
// deletion there — the watcher's judging and checkpoints.keep, the resume selection's
// quarantine and retention, the mirror's restore — runs on the keeper's one thread in the
// order posted, so none of them can race another. Shared by the watcher, the resume
// selector and the mirror. Post/Call from any thread except the keeper's own; the members
// marked "keeper thread" only from work running there. Time (how long a validation took)
// comes from the run's Clock.
#pragma once

#include <atomic>
#include <boost/asio/post.hpp>
#include <boost/asio/thread_pool.hpp>
#include <filesystem>
#include <functional>
#include <future>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <type_traits>

#include "spotvisor/checkpoint/catalog.hpp"
#include "spotvisor/checkpoint/resume_selector.hpp"
#include "spotvisor/config/job_config.hpp"
#include "spotvisor/util/clock.hpp"

namespace spotvisor::checkpoint_watch {

class DirKeeper {
 public:
  // `job` must have checkpoints.dir; `job` and `clock` (the run's) outlive the keeper.
  DirKeeper(const config::JobConfig& job, Clock& clock);
  ~DirKeeper();  // runs the work already posted, then joins
  DirKeeper(const DirKeeper&) = delete;
  DirKeeper& operator=(const DirKeeper&) = delete;

  // Runs `work` on the keeper's thread after everything posted before it.
  void Post(std::function<void()> work) { boost::asio::post(thread_, std::move(work)); }

  // Runs `work` there and waits for its result: never from the keeper's thread, never
  // from the io thread (work there may validate a whole checkpoint).
  template <typename F>
  std::invoke_result_t<F&> Call(F work) {
    std::packaged_task<std::invoke_result_t<F&>()> task(std::move(work));
    auto done = task.get_future();
    boost::asio::post(thread_, [&task] { task(); });
    return done.get();
  }

  // ---- keeper thread ----
  // The catalog every user shares (its cache file re-read at each selection); null when
  // it cannot be made (logged once).
  checkpoint::Catalog* catalog();
  // Fills e.verdict: a verdict this process reached by validating the same name and key
  // (the watcher's, a mirror restore's) is reused; anything else is validated now.
  void Judge(checkpoint::CatalogEntry& e);
  // checkpoints.keep after a new good checkpoint appeared: only checkpoints already judged
  // count (one the watcher has not judged yet is not read here); failures logged.
  void ApplyRetention();
  // The state dir recorded a new start: the catalog's fence is read again, so that what a
  // writer the group left behind saves above it is fenced from now on, not counted as good.
  void RefreshFence();
  // The selection before a start (or after a drain): validates now, quarantines, applies
  // retention and the latest link. Only verdicts this same selection reached (NewestGood
  // for a restore, NoteRestored) are not read again; the watcher's are.
  Result<checkpoint::Selection> SelectForResume();
  // The newest good checkpoint changing nothing. `for_selection`: the verdicts it reaches
  // are the next selection's (a mirror restore asks first); else any verdict this process
  // reached is reused (the mirror's last upload at exit).
  std::optional<checkpoint::ResumePoint> NewestGood(bool for_selection);
  // A mirror restore put `path` in place and validated it: good for the next selection.
  void NoteRestored(const std::filesystem::path& path);
  // A fixed-name checkpoint (version_store.hpp): keeps a version of the file in place when
  // a verdict of this process says it is good and no version holds it yet. A byte copy
  // (no reflink here) gives way while the trainer is being stopped and is made after it.
  void KeepFixedVersion();

  // ---- any thread ----
  // The trainer is being stopped (Phase::kStopping): byte copies wait until it is not.
  void SetStopping(bool stopping) { stopping_ = stopping; }

  // ---- any thread: the mirror's hold on retention (issue 36) ----
  // From now on checkpoints.keep never deletes a checkpoint that is being uploaded or is
  // newer than the newest one the mirror holds: until then it is the only copy that can
  // outlive the machine. Held ones count as kept; each is logged once (retention_held).
  void HoldUntilDurable();
  void MarkUploading(const std::string& name, bool uploading);
  void MarkDurable(std::uint64_t step);  // the mirror holds this step (or a newer one)

  // ---- any thread: the start's hold on retention ----
  // checkpoints.keep never deletes what a start is or may be made from: from a selection
  // until the attempt starts, every good checkpoint it found (a group agrees on one of them,
  // and meanwhile a writer the group has left behind may save newer ones that look good
  // until the new epoch fences them); from the start until the next selection, the one the
  // trainer resumed from (none: a fresh start). Held ones count as kept.
  void HoldStart(std::set<std::filesystem::path> paths);

 private:
  const config::JobConfig& job_;                  // not owned
  Clock& clock_;                                  // not owned; times validations
  std::optional<checkpoint::Catalog> catalog_;    // keeper thread; remade at each selection
  bool catalog_failed_ = false;                   // said once
  checkpoint::VerdictCache validated_;            // keeper thread: verdicts this process validated
  checkpoint::VerdictCache for_selection_;        // keeper thread: validated since the last selection, for it
  std::optional<checkpoint::CacheKey> kept_key_;  // keeper thread: the content in place last kept (or failed)
  bool said_deferred_ = false;                    // keeper thread: version_deferred logged for this content
  std::atomic<bool> stopping_{false};             // the trainer is being stopped
  // Why retention must keep `e` (the mirror's hold), or none; any thread.
  std::optional<std::string> HeldBecause(const checkpoint::CatalogEntry& e);
  void SetHeld(checkpoint::Catalog& c);
  std::mutex hold_mutex_;                      // guards the four below
  bool hold_ = false;                          // a mirror is on
  std::set<std::string> uploading_;            // queued or uploading, by name
  std::optional<std::uint64_t> durable_step_;  // the newest step the mirror holds
  std::set<std::filesystem::path> start_;      // HoldStart's
  boost::asio::thread_pool thread_{1};         // the one thread (declared last: joined first)
};

// The resume selector of `spotvisor run` with a checkpoints.dir: selections on the keeper.
std::unique_ptr<checkpoint::ResumeSelector> MakeKeptSelector(std::shared_ptr<DirKeeper> keeper);

}  // namespace spotvisor::checkpoint_watch

// The mirror during `spotvisor run`: restores the newest good checkpoint from the mirror
// before the first selection when the local directory is empty or older, and uploads
// every checkpoint that validates (new ones from the feed, the one chosen at each
// selection, the newest one at exit) with at most `mirror.concurrency` uploads at once and
// `mirror.bandwidth` bytes/s, newest first (a queued older one is superseded). Uploads run
// on their own threads, during a stop too: the checkpoint saved for a notice starts as soon
// as it validates, and while a stop notice or a stop is on, an older upload that holds the
// last free slot gives way to it (`event=mirror_yielded`). On an object store
// (MirrorStore::UploadsEarly) a directory checkpoint being written during a stop goes up
// file by file as the trainer closes each (`event=mirror_early`), before its verdict: the
// upload after the verdict sends only the rest and marks it complete, as always. At exit, uploads still going get
// until the stop notice's deadline (without one: `mirror.timeout`) to finish (real time:
// the loop has ended by then), then are cancelled. Time is the run's clock
// (RunControl::clock()): an upload that runs holds its BackgroundWork, so a virtual clock
// stands still while it copies. After each upload the planner (durability_plan.hpp) says
// whether save + upload fits the provider's warning window (`event=durability_plan` when
// the verdict changes, `event=durability_at_risk` with the numbers and the fixes when it
// does not fit). While the mirror runs, local retention (the DirKeeper's)
// keeps what has not reached it.
#pragma once

#include <boost/asio/thread_pool.hpp>
#include <condition_variable>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <stop_token>
#include <string>
#include <vector>

#include "spotvisor/checkpoint_watch/checkpoint_watcher.hpp"
#include "spotvisor/config/name_pattern.hpp"
#include "spotvisor/mirror/durability_ledger.hpp"
#include "spotvisor/mirror/durability_plan.hpp"
#include "spotvisor/mirror/mirror_store.hpp"
#include "spotvisor/mirror/rate_limiter.hpp"
#include "spotvisor/supervisor/run_observer.hpp"

namespace spotvisor::mirror {

class MirrorObserver final : public supervisor::RunObserver {
 public:
  // New good checkpoints come from `watcher`; the restore and the last look at exit run on
  // its DirKeeper (a restore writes into checkpoints.dir). `watcher` must outlive Run.
  MirrorObserver(const config::JobConfig& job, checkpoint_watch::CheckpointWatcher& watcher);
  ~MirrorObserver() override;  // drains as OnExit does (when it did not run), then joins

  void OnStart(supervisor::RunControl& control) override;  // makes the store and the limiter
  void BeforeSelection() override;
  void OnSelection(const checkpoint::Selection& selection) override;
  void OnNotice(const preemption::Notice& notice) override;
  void OnPhase(supervisor::Phase phase) override;
  void OnAttemptStarted(const supervisor::SpawnAction& start, pid_t pid) override;  // whose files are open
  void OnAttemptEnded(const state::AttemptRecord& record) override;
  // Looks once more for the newest good checkpoint, then waits for the uploads until the
  // stop notice's deadline (none: mirror.timeout) and cancels what is left: the exit line
  // is out, and observers after this one (the run report) see what reached the mirror.
  void OnExit(int code, const std::string& message) override;

  // Before OnStart, one per subscriber: `done` hears of every checkpoint the mirror holds
  // after an upload (or held already), with the planner's verdict then, on the upload's
  // thread (also while OnExit drains; never after it, so a subscriber may go once every
  // observer's OnExit ran).
  using Uploaded = std::function<void(const MirrorItem& item, const std::optional<DurabilityPlan>& plan)>;
  void SubscribeUploaded(Uploaded done) { uploaded_.push_back(std::move(done)); }

  // The planner's verdict after the last upload (durability_plan.hpp); nullopt before one.
  std::optional<DurabilityPlan> Plan();

  // For tests and the destructor: waits until no upload is queued or running, at most
  // `timeout`; true when idle.
  bool WaitIdle(Duration timeout);

 private:
  void Restore();  // keeper thread
  // An upload under way, and how to make it give way.
  struct Running {
    MirrorItem item;
    std::shared_ptr<std::stop_source> stop;
  };
  void Enqueue(MirrorItem item);
  void Writing(const std::filesystem::path& path);  // io thread: a checkpoint caught half-way
  // Upload thread: uploads the closed files of `item` (a directory being written) until it
  // validates, a newer one arrives, the stop ends or the observer does.
  void Early(const MirrorItem& item, const std::shared_ptr<std::stop_source>& own);
  void YieldOlderLocked(const MirrorItem& newer);
  void Work();  // upload thread: the newest queued item
  void Upload(const MirrorItem& item, const std::stop_source& own);
  void TellUploaded(const MirrorItem& item);      // the subscribers, until the drain closes them
  void PruneMirror(const std::stop_source& own);  // after an upload
  CopyControl Control(const std::stop_source& own);
  Duration ExitBound() const;
  void Drain();                                     // once: waits at most ExitBound(), then cancels every upload
  void Replan(std::uint64_t bytes, Duration took);  // upload thread
  int Keep() const;
  void HoldClockLocked();

  const config::JobConfig& job_;                         // not owned
  std::shared_ptr<checkpoint_watch::DirKeeper> keeper_;  // owns checkpoints.dir
  Clock* clock_ = nullptr;                               // the run's; from OnStart on
  supervisor::RunControl* control_ = nullptr;            // from OnStart on: ExitHurried
  std::unique_ptr<MirrorStore> store_;                   // path, remote or command; from OnStart on
  std::optional<DurabilityLedger> ledger_;               // with store_: durability.json
  std::optional<RateLimiter> limiter_;                   // mirror.bandwidth, shared by uploads; from OnStart on
  std::mutex mutex_;                                     // guards the members below
  std::condition_variable changed_;                      // work finished
  std::deque<MirrorItem> queue_;                         // waiting, oldest first
  std::set<std::string> active_;                         // names queued or uploading
  std::vector<Running> running_;                         // uploads under way
  int busy_ = 0;                                         // tasks posted and not finished
  bool stopping_ = false;                                // a stop is in progress
  std::optional<WallTime> deadline_;                     // the last stop notice's
  std::optional<DurabilityPlan> plan_;                   // after the last upload
  std::optional<MirrorItem> early_;                      // the directory going up before its verdict
  std::shared_ptr<std::stop_source> early_stop_;         // makes it give way to a newer one
  pid_t trainer_ = 0;                                    // the running trainer's group; 0 when none
  std::optional<config::NamePattern> pattern_;           // checkpoints.pattern: an arrival's step
  bool restore_done_ = false;                            // restore runs before the first selection only
  std::vector<Uploaded> uploaded_;                       // set before OnStart, then read only
  std::mutex telling_;                                   // held while telling uploaded_; Drain closes it
  bool told_last_ = false;                               // under telling_: after the drain, no more
  bool drained_ = false;                                 // Drain ran (the io thread, or the destructor)
  bool warned_prune_ = false;                            // said once that prune_command is missing
  std::shared_ptr<void> holding_;                        // the clock's BackgroundWork while busy
  std::stop_source stop_;                                // give up uploads (destructor, after the drain)
  boost::asio::thread_pool pool_;                        // upload threads (declared last: joined first)
};

}  // namespace spotvisor::mirror

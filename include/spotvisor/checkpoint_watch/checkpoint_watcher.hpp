// The one checkpoint watcher of `spotvisor run`: polls checkpoints.dir (slowly, or fast
// while a requested checkpoint is awaited), judges each new or changed checkpoint when it
// sees it — one validation at the job's level, on the DirKeeper's thread; a bad verdict is
// told once the checkpoint held still for half a slow period (a save caught half-way is
// judged again when it changes) — applies checkpoints.keep after a new good one, and hands
// each verdict to its subscribers on the io thread: telemetry (the run record, metrics, on_checkpoint),
// cadence (the cost of a request) and the mirror; after each scan, a fixed-name checkpoint
// judged good gets its version kept (DirKeeper::KeepFixedVersion). What existed at start
// is the baseline, not news. Polls, "held still" and detection times run on the run's Clock. A RunObserver;
// Subscribe and Hurry on the io thread.
#pragma once

#include <chrono>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "spotvisor/checkpoint/verdict_cache.hpp"
#include "spotvisor/checkpoint_watch/checkpoint_shape.hpp"
#include "spotvisor/checkpoint_watch/dir_keeper.hpp"
#include "spotvisor/supervisor/run_observer.hpp"

namespace spotvisor::checkpoint_watch {

// A new (or changed) checkpoint and the watcher's verdict on it.
struct CheckpointVerdict {
  std::filesystem::path path;  // checkpoints.dir / name
  std::string name;            // the entry's name
  std::uint64_t step = 0;      // from the name
  CheckpointShape shape;       // size, newest mtime, oldest birth
  bool good = false;
  std::string reason;    // the validator's words
  WallTime written_at;   // newest mtime (ns), a marker beside it included
  WallTime detected_at;  // when the verdict was reached (the clock's wall time)
};

struct WatchTiming {
  Duration slow = std::chrono::seconds(2);         // poll period while nothing is awaited
  Duration fast = std::chrono::milliseconds(100);  // while a requested checkpoint is awaited
};

class CheckpointWatcher final : public supervisor::RunObserver {
 public:
  // What one scan judged, oldest step first; never empty.
  using Subscriber = std::function<void(const std::vector<CheckpointVerdict>&)>;
  // The checkpoints one scan saw being written: new or changed, not good yet, not told.
  using WriteSubscriber = std::function<void(const std::vector<std::filesystem::path>&)>;
  // A new or changed checkpoint about to be judged (its newest mtime with it); its verdict
  // follows in the same scan's news (a good one to Subscriber, one not good yet to
  // WriteSubscriber).
  using ArrivalSubscriber =
      std::function<void(const std::filesystem::path&, std::chrono::system_clock::time_point written_at)>;

  // `job` must have checkpoints.dir and outlive the watcher; `keeper` owns the directory.
  // The job is the keeper's (its checkpoints.dir, pattern and level). `clock` is the run's
  // (the RunControl's of OnStart) and outlives the watcher.
  CheckpointWatcher(std::shared_ptr<DirKeeper> keeper, Clock& clock, WatchTiming timing = {});
  ~CheckpointWatcher() override;  // waits for a scan in progress

  // Before OnStart; subscribers run on the io thread in subscription order.
  void Subscribe(Subscriber subscriber);
  void SubscribeWrites(WriteSubscriber subscriber);
  void SubscribeArrivals(ArrivalSubscriber subscriber);
  // io thread: poll fast (a checkpoint was requested) or slowly again.
  void Hurry(bool on);
  const std::shared_ptr<DirKeeper>& keeper() const { return keeper_; }

  void OnStart(supervisor::RunControl& control) override;
  void OnSelection(const checkpoint::Selection& selection) override;                // scans at once
  void OnAttemptStarted(const supervisor::SpawnAction& start, pid_t pid) override;  // holds its checkpoint
  void OnAttemptEnded(const state::AttemptRecord& record) override;                 // scans at once
  // kStopping: a fixed name's version made by a byte copy waits (DirKeeper::SetStopping);
  // kDeferred and kStopping: fast polling, as for a request (a deferred stop waits for the
  // next checkpoint; a stop's checkpoint goes to the mirror at once).
  void OnPhase(supervisor::Phase phase) override;
  void OnExit(int code, const std::string& message) override;

 private:
  // Per name: the key it had when last seen, and what became of it.
  struct Seen {
    checkpoint::CacheKey key;
    SteadyTime since;                          // first seen with this key
    bool judged = false;                       // validated at this key
    bool told = false;                         // handed to the subscribers
    std::optional<CheckpointVerdict> verdict;  // once judged
  };

  void Await(bool on);  // io thread: fast polling while a deferred stop waits or a stop is on (OnPhase)
  void Arm();
  void Tick();
  struct ScanNews {
    std::vector<CheckpointVerdict> verdicts;     // to hand out, oldest step first
    std::vector<std::filesystem::path> writing;  // being written
  };
  // Keeper thread only: one scan; what it found.
  // `prune`: checkpoints.keep may delete after a new good checkpoint (see MayPrune).
  ScanNews Scan(bool prune);
  // Alone, always. In a group, only while this node's trainer runs in an agreed epoch and the
  // node is a member for sure: a node left behind (stopped or starved past its lease) sees its
  // trainer's saves as good until it learns of the epoch that fences them, and would delete the
  // checkpoints the rest of the group runs from; a node waiting to join knows no newer epoch.
  bool MayPrune() const;
  CheckpointVerdict JudgeOne(checkpoint::CatalogEntry& entry);

  std::shared_ptr<DirKeeper> keeper_;                   // the directory's one owner
  Clock& clock_;                                        // not owned; the run's
  WatchTiming timing_;                                  // poll periods
  std::vector<Subscriber> subscribers_;                 // io thread
  std::vector<WriteSubscriber> write_subscribers_;      // io thread
  std::vector<ArrivalSubscriber> arrival_subscribers_;  // io thread
  std::unique_ptr<Timer> timer_;                        // the poll clock (io thread), from OnStart
  boost::asio::io_context* io_ = nullptr;               // the driver's loop
  bool hurry_ = false;                                  // io thread: fast polling (a requested checkpoint)
  bool awaiting_ = false;                               // io thread: fast polling (a deferred stop)
  bool scanning_ = false;                               // io thread: a scan is on the keeper
  bool again_ = false;                                  // io thread: scan once more when it returns
  bool stopped_ = false;                                // io thread: OnExit came
  bool group_ = false;                                  // a coordinated job: coordination.etcd (from OnStart)
  bool running_ = false;                                // io thread: the trainer runs (or defers its stop)
  supervisor::RunControl* control_ = nullptr;           // from OnStart
  // Keeper-thread state.
  bool baseline_done_ = false;        // the first scan only records
  std::map<std::string, Seen> seen_;  // by name
};

}  // namespace spotvisor::checkpoint_watch

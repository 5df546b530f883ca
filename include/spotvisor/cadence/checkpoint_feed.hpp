// Notices good checkpoints as they appear in checkpoints.dir during a run, for the cadence
// (cost of a requested checkpoint) and the mirror (copy each new good one), and applies
// checkpoints.keep each time one appears. Polls the
// directory on its own worker thread — slowly, or fast while a requested checkpoint is
// awaited — validates new or changed entries at the job's level, newest first, and reports
// the newest good one to its listeners on the io thread. What existed at start is the
// baseline, not news. Registered as a RunObserver before its listeners.
#pragma once

#include <boost/asio/steady_timer.hpp>
#include <boost/asio/thread_pool.hpp>
#include <chrono>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "spotvisor/checkpoint/catalog.hpp"
#include "spotvisor/supervisor/run_observer.hpp"

namespace spotvisor::cadence {

// A checkpoint that appeared and passed validation.
struct NewCheckpoint {
  std::filesystem::path path;                           // checkpoints.dir / name
  std::string name;                                     // the entry's name
  std::uint64_t step = 0;                               // from the name
  std::uint64_t size_bytes = 0;                         // all its files
  std::chrono::system_clock::time_point written_at;     // newest mtime inside it
  std::chrono::system_clock::time_point detected_at;    // when the poll found it good
};

struct FeedTiming {
  Duration slow = std::chrono::seconds(2);              // poll period while nothing is awaited
  Duration fast = std::chrono::milliseconds(100);       // while a requested checkpoint is awaited
};

class CheckpointFeed final : public supervisor::RunObserver {
 public:
  using Listener = std::function<void(const NewCheckpoint&)>;

  // `job` must have checkpoints.dir and outlive the feed.
  explicit CheckpointFeed(const config::JobConfig& job, FeedTiming timing = {});
  ~CheckpointFeed() override;  // waits for a scan in progress

  // Before OnStart; listeners run on the io thread in subscription order.
  void Subscribe(Listener listener);
  // io thread: poll fast (a checkpoint was requested) or slowly again.
  void Hurry(bool on);

  void OnStart(supervisor::RunControl& control) override;
  void OnExit(int code, const std::string& message) override;

 private:
  void Arm();
  void Tick();
  // Worker thread only: one scan; the newest new good checkpoint, if any.
  std::optional<NewCheckpoint> Scan();
  // Worker thread only: checkpoints.keep applied after a new good checkpoint appeared.
  void Retain();

  const config::JobConfig& job_;                       // not owned
  FeedTiming timing_;                                  // poll periods
  std::vector<Listener> listeners_;                    // io thread
  std::optional<boost::asio::steady_timer> timer_;     // the poll clock (io thread)
  boost::asio::io_context* io_ = nullptr;              // the driver's loop
  bool hurry_ = false;                                 // io thread: fast polling
  bool scanning_ = false;                              // io thread: a scan is on the worker
  bool stopped_ = false;                               // io thread: OnExit came
  // Worker-thread state.
  std::optional<checkpoint::Catalog> catalog_;         // side-effect-free view of the dir
  bool baseline_done_ = false;                         // the first scan only records
  std::map<std::string, checkpoint::CacheKey> seen_;   // name -> key when last judged
  boost::asio::thread_pool pool_{1};                   // the scanning thread (declared last: joined first)
};

}  // namespace spotvisor::cadence

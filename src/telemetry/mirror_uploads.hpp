// The mirror's finished uploads, carried from its upload thread to the io thread, and what
// they make durable: the newest checkpoint on the mirror, the planner's last verdict, every
// checkpoint this run got there (what a notice's new VM resumes from). The upload thread only
// appends under the feed's mutex and posts; everything else is the io thread's. Owned by the
// telemetry observer, which takes what waits at once, before a notice and at exit.
#pragma once

#include <boost/asio/io_context.hpp>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "spotvisor/mirror/durability_plan.hpp"
#include "spotvisor/telemetry/notice_saves.hpp"
#include "spotvisor/telemetry/run_ledger.hpp"
#include "spotvisor/util/clock.hpp"

namespace spotvisor::mirror {
class MirrorObserver;
}  // namespace spotvisor::mirror

namespace spotvisor::telemetry {

class MirrorUploads {
 public:
  // Subscribes to `mirror`'s finished uploads (before its OnStart). After each, `ready` runs
  // on the io thread, until Detach. Uploads before Attach are not kept.
  MirrorUploads(mirror::MirrorObserver& mirror, std::function<void()> ready);
  ~MirrorUploads() { Detach(); }
  MirrorUploads(const MirrorUploads&) = delete;
  MirrorUploads& operator=(const MirrorUploads&) = delete;

  // The run's loop and clock (OnStart): uploads are kept from now on, stamped with the
  // clock's wall time when they finished.
  void Attach(boost::asio::io_context& io, Clock& clock);
  // Nobody listens any more: uploads are dropped, and a `ready` already posted does not run.
  void Detach();

  // io thread: the uploads kept since the last call, into `ledger` (their checkpoints marked
  // mirrored) and into what is durable; the notices whose deadline has passed are settled
  // with it. False when none was waiting (the ledger is unchanged).
  bool Take(RunLedger& ledger);
  // The run ends: every notice still open gets what was durable by its deadline.
  void SettleAll(RunLedger& ledger) const;

  // The newest checkpoint on the mirror: step, unix ms it got there.
  const std::optional<std::pair<std::uint64_t, std::int64_t>>& newest_durable() const { return newest_durable_; }
  // The planner's last verdict.
  const std::optional<mirror::DurabilityPlan>& durability() const { return durability_; }

 private:
  // What the upload thread and the io thread share: each upload is kept (with the time it
  // finished) until the io thread takes it.
  struct Feed {
    struct Done {
      std::string name;
      std::uint64_t step = 0;
      std::int64_t at_ms = 0;  // unix ms when the upload finished
      std::optional<mirror::DurabilityPlan> plan;
    };
    std::mutex mutex;
    boost::asio::io_context* io = nullptr;  // set at Attach
    Clock* clock = nullptr;                 // set at Attach
    MirrorUploads* owner = nullptr;         // io thread reads; cleared under the mutex
    std::vector<Done> done;                 // not yet taken
  };

  std::shared_ptr<Feed> feed_;   // shared with the mirror's callback, which may outlive us
  std::function<void()> ready_;  // the observer's: take what waits
  Clock* clock_ = nullptr;       // the run's, from Attach
  std::optional<std::pair<std::uint64_t, std::int64_t>> newest_durable_;
  std::optional<mirror::DurabilityPlan> durability_;
  std::vector<DurableAt> durable_;  // every checkpoint found on the mirror by this run, in order
};

}  // namespace spotvisor::telemetry

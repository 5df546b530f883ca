// One interface for every source of a preemption notice (AWS, GCP, Azure, Alibaba, a
// trigger file). A watcher runs on the supervisor's io_context thread and reports through
// callbacks on that thread; it never signals the trainer itself. Owned by the driver.
#pragma once

#include <chrono>
#include <functional>
#include <memory>
#include <optional>
#include <string>

#include "spotvisor/config/job_config.hpp"
#include "spotvisor/util/result.hpp"

namespace boost::asio {
class io_context;
}  // namespace boost::asio

namespace spotvisor::preemption {

// What a notice asks of the trainer.
enum class NoticeAction {
  kStop,        // checkpoint and stop: the machine is going away
  kCheckpoint,  // checkpoint and keep going (e.g. AWS rebalance recommendation)
};

struct Notice {
  std::string provider;       // "aws", "gcp", "azure", "alibaba", "file"
  std::string kind;           // "terminate", "stop", "hibernate", "preempt", "maintenance", "rebalance", "file"
  NoticeAction action = NoticeAction::kStop;
  std::optional<std::chrono::system_clock::time_point> deadline;  // cloud clock; may be absent
  std::string id;             // de-duplication key (Azure EventId, or content)
  std::string detail;         // the raw payload, trimmed, for logs and the notice file
};

class Watcher {
 public:
  using NoticeHandler = std::function<void(const Notice&)>;
  using ClearedHandler = std::function<void()>;
  virtual ~Watcher() = default;

  // Starts watching. `on_notice` is called once per distinct notice, `on_cleared` when a
  // stop notice seen before is gone again (the machine survived). Both on the io thread.
  virtual void Start(NoticeHandler on_notice, ClearedHandler on_cleared) = 0;
  // Cancels every pending operation; no callback runs after this returns.
  virtual void Stop() = 0;
  // Tells the provider the trainer has stopped and its checkpoint is safe (Azure
  // StartRequests when configured); a no-op elsewhere.
  virtual void Acknowledge(const Notice& notice) = 0;
};

// The watcher for `provider.kind` (auto resolved from DMI files); nullptr for `none`.
// An Error when the configuration cannot work (e.g. a malformed endpoint).
Result<std::unique_ptr<Watcher>> MakeWatcher(boost::asio::io_context& io,
                                             const config::ProviderSection& provider);

}  // namespace spotvisor::preemption

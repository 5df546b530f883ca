// One interface for every source of a preemption notice (AWS, GCP, Azure, Alibaba, a
// trigger file). A watcher runs on the supervisor's io_context thread and reports through
// callbacks on that thread; it never signals the trainer itself. Owned by the driver. Its
// polls, backoff and default deadlines run on the Clock it is made with (the host's); the
// HTTP requests' own deadlines are real time (a real socket).
#pragma once

#include <chrono>
#include <functional>
#include <memory>
#include <optional>
#include <string>

#include "spotvisor/config/job_config.hpp"
#include "spotvisor/util/clock.hpp"
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
  std::string provider;  // "aws", "gcp", "azure", "alibaba", "file"
  std::string kind;      // "terminate", "stop", "hibernate", "preempt", "maintenance", "rebalance", "file"
  NoticeAction action = NoticeAction::kStop;
  std::optional<std::chrono::system_clock::time_point> deadline;  // cloud clock; may be absent
  std::string id;                                                 // de-duplication key (Azure EventId, or content)
  std::string detail;  // the raw payload, trimmed, for logs and the notice file
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

// Timings that are fixed by the providers' documentation in production; tests shrink them.
struct WatcherTuning {
  // gcp: delay before retrying a 503 (Google's sample: 1 s, during maintenance)
  Duration retry_after_503 = std::chrono::seconds(1);
  // ceiling of the error backoff, which starts at provider.poll_interval
  Duration backoff_max = std::chrono::seconds(10);
  // gcp: timeout_sec of a wait_for_change long-poll
  std::chrono::seconds long_poll_timeout{60};
  // azure: the first Scheduled Events call may take up to two minutes
  Duration azure_first_call_timeout = std::chrono::minutes(2);
  // azure: IMDS allows 5 requests/s; never poll faster than this
  Duration azure_min_interval = std::chrono::seconds(1);
  // aws/alibaba: renew the token this long before it expires (at most a quarter of the TTL)
  Duration token_refresh_margin = std::chrono::seconds(60);
};

// The watcher for `provider.kind` (auto resolved from DMI files); nullptr for `none`.
// An Error when the configuration cannot work (e.g. a malformed endpoint). `clock` outlives
// the watcher.
Result<std::unique_ptr<Watcher>> MakeWatcher(boost::asio::io_context& io, Clock& clock,
                                             const config::ProviderSection& provider);
Result<std::unique_ptr<Watcher>> MakeWatcher(boost::asio::io_context& io, Clock& clock,
                                             const config::ProviderSection& provider, const WatcherTuning& tuning);

}  // namespace spotvisor::preemption

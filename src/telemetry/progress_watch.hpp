// When each attempt first shows progress, for goodput: the heartbeat file's mtime moving past
// the attempt's start (health.heartbeat_file, polled every second until it does), else the
// first output line that matches health.progress_pattern; and the step that pattern's group
// last showed. Without either the report takes the attempt's first checkpoint. Owned by the
// telemetry observer; timers of the run's clock; io thread only.
#pragma once

#include <boost/asio/io_context.hpp>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <regex>
#include <string_view>

#include "spotvisor/config/job_config.hpp"
#include "spotvisor/util/clock.hpp"

namespace spotvisor::telemetry {

class ProgressWatch {
 public:
  // Called once per attempt with the first progress's unix ms (the run's clock, or the
  // heartbeat file's mtime).
  using FirstProgress = std::function<void(std::int64_t ms)>;

  // `health`, `clock` and `io` outlive the watch. health.progress_pattern has been compiled
  // by the loader already: this does not throw.
  ProgressWatch(const config::HealthSection& health, Clock& clock, boost::asio::io_context& io,
                FirstProgress first_progress);
  ProgressWatch(const ProgressWatch&) = delete;
  ProgressWatch& operator=(const ProgressWatch&) = delete;

  // Where first progress comes from: "heartbeat", "progress_pattern" or "first_checkpoint".
  const char* source() const;
  // An attempt started at `started_ms` (unix ms): the last step is forgotten, and its first
  // progress watched for.
  void AttemptStarted(std::int64_t started_ms);
  // The attempt is over: what it did not show is not waited for any more.
  void AttemptEnded();
  // A line of the trainer's output.
  void Line(std::string_view line);
  // The run is over: no more polling.
  void Stop();

  // The step the current attempt's output last showed (progress_pattern's group), if any.
  std::optional<std::uint64_t> last_step() const { return last_step_; }

 private:
  void PollHeartbeat();
  void Reached(std::int64_t ms);

  const config::HealthSection& health_;     // outlives us
  Clock& clock_;                            // the run's
  boost::asio::io_context& io_;             // the run's loop
  FirstProgress first_progress_;            // the observer's record of it
  std::optional<std::regex> pattern_;       // health.progress_pattern, without a heartbeat file
  std::unique_ptr<Timer> poll_;             // polls the heartbeat file until it moves
  std::optional<std::int64_t> started_;     // the current attempt's start (unix ms)
  bool awaiting_ = false;                   // the current attempt has shown no progress yet
  std::optional<std::uint64_t> last_step_;  // the current attempt's last progress_pattern step
  bool stopped_ = false;                    // the run is over
};

}  // namespace spotvisor::telemetry

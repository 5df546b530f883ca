// Hang detection (`health.hang_timeout`) by the trainer's pulse: the mtime of
// `health.heartbeat_file`, and/or the last output line matching `health.progress_pattern`
// (whose first capture group, when there is one, is the step reached). No pulse for the
// timeout since the trainer started or last beat → RequestStop(kHang): the usual grace,
// then a restart from the newest good checkpoint within restart.max_hangs. Looks only
// while the trainer runs; the stat runs on a worker thread (a hung network filesystem must
// not block the io thread). Time and timers come from RunControl::clock(). io thread.
#pragma once

#include <boost/asio/thread_pool.hpp>
#include <memory>
#include <optional>
#include <regex>
#include <string>

#include "spotvisor/health/pulse.hpp"
#include "spotvisor/supervisor/run_observer.hpp"

namespace spotvisor::health {

class HeartbeatMonitor final : public supervisor::RunObserver {
 public:
  // `job.health.heartbeat_file` or a valid `progress_pattern` must be set; `job` outlives
  // the monitor.
  explicit HeartbeatMonitor(const config::JobConfig& job);
  ~HeartbeatMonitor() override;  // waits for a stat in flight

  void OnStart(supervisor::RunControl& control) override;
  void OnAttemptStarted(const supervisor::SpawnAction& start, pid_t pid) override;
  void OnPhase(supervisor::Phase phase) override;
  void OnTrainerLine(std::string_view line) override;
  void OnExit(int code, const std::string& message) override;

 private:
  void ArmIn(Duration delay);
  void Look();
  void Judge(int attempt, std::optional<WallTime> heartbeat);
  std::string Source() const;  // "heartbeat_file=... progress_pattern=..." for logs

  const config::JobConfig& job_;               // not owned
  supervisor::RunControl* control_ = nullptr;  // set in OnStart
  Clock* clock_ = nullptr;                     // control_->clock(), set in OnStart
  std::unique_ptr<Timer> timer_;               // the next look
  int attempt_ = 0;                            // the watched attempt; 0 = none
  WallTime started_wall_{};                    // its start, on the mtime clock
  SteadyTime started_{};                       // its start, on the steady clock
  std::optional<std::regex> progress_;         // health.progress_pattern, compiled
  std::optional<WallTime> last_line_;          // last matching line of this attempt
  std::optional<std::uint64_t> last_step_;     // its step, when the pattern has a group
  bool looking_ = false;                       // a stat is on the worker
  bool stopped_ = false;                       // OnExit came
  boost::asio::thread_pool worker_{1};         // stat()s (declared last: joined first)
};

}  // namespace spotvisor::health

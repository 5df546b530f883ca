// The telemetry observer's class, shared by its two sources: telemetry_observer.cpp (the run's
// events as they come) and telemetry_outputs.cpp (what it starts and writes: metrics,
// timers, the budget check, checkpoints, the report, systemd's status line). Time is the
// run's clock (RunControl::clock()); the record, the hooks and the sampler are made in
// OnStart, when that clock is known. io thread only; NVML runs on the sampler's thread.
#pragma once

#include <boost/asio/io_context.hpp>
#include <filesystem>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <regex>
#include <string>
#include <utility>

#include "gpu_sampler.hpp"
#include "run_hooks.hpp"
#include "run_record.hpp"
#include "spotvisor/checkpoint_watch/checkpoint_watcher.hpp"
#include "spotvisor/mirror/mirror_observer.hpp"
#include "spotvisor/preemption/instance_facts.hpp"
#include "spotvisor/supervisor/run_observer.hpp"
#include "spotvisor/telemetry/metrics_server.hpp"
#include "spotvisor/telemetry/telemetry_observer.hpp"
#include "spotvisor/util/clock.hpp"
#include "systemd_status.hpp"

namespace spotvisor::telemetry {

class TelemetryObserver final : public supervisor::RunObserver {
 public:
  // `job` and `watcher` (null: no checkpoints.dir) outlive the observer.
  TelemetryObserver(const config::JobConfig& job, checkpoint_watch::CheckpointWatcher* watcher,
                    std::optional<MetricsEndpoint> endpoint, std::optional<SdNotifier> notifier,
                    ReportWriter write_report)
      : job_(job),
        endpoint_(std::move(endpoint)),
        systemd_(std::move(notifier)),
        write_report_(std::move(write_report)) {
    Subscribe(watcher);
  }

  void OnStart(supervisor::RunControl& control) override;
  void OnSelection(const checkpoint::Selection& selection) override;
  void OnAttemptStarted(const supervisor::SpawnAction& start, pid_t pid) override;
  void OnAttemptEnded(const state::AttemptRecord& record) override;
  void OnNotice(const preemption::Notice& n) override;
  void OnSignalSent(int signo, config::SignalTarget to) override;
  void OnTrainerLine(std::string_view line) override;
  void OnPhase(supervisor::Phase phase) override;
  void OnExit(int code, const std::string& message) override;
  ~TelemetryObserver() override { DetachMirror(); }

  // Finished mirror uploads reach the io thread through this feed: each is kept (with the
  // time it finished) until the io thread takes it, as soon as it can, or at OnExit, after
  // the mirror's drain (its OnExit comes first). After our OnExit nobody listens.
  struct MirrorFeed {
    struct Done {
      std::string name;
      std::uint64_t step = 0;
      std::int64_t at_ms = 0;  // unix ms when the upload finished
      std::optional<mirror::DurabilityPlan> plan;
    };
    std::mutex mutex;
    boost::asio::io_context* io = nullptr;  // set at OnStart
    Clock* clock = nullptr;                 // set at OnStart
    TelemetryObserver* owner = nullptr;     // io thread reads; cleared under the mutex
    std::vector<Done> done;                 // not yet taken
  };
  void Subscribe(mirror::MirrorObserver* mirror);

 private:
  // ---- start (telemetry_outputs.cpp) ----
  void AskInstanceFacts(boost::asio::io_context& io);
  void StartMetrics(boost::asio::io_context& io);
  void StartTimers(boost::asio::io_context& io);
  void Every(Timer& timer, Duration period, std::function<void()> what);
  // ---- checkpoints, budget ----
  void Subscribe(checkpoint_watch::CheckpointWatcher* watcher);  // new verdicts go to OnCheckpoint
  void OnCheckpoint(const checkpoint_watch::CheckpointVerdict& v);
  void CheckBudget();
  // ---- notices to saves, first progress, waiting (telemetry_progress.cpp) ----
  void TrackProgress();  // at a start: how its first progress will be known
  void FirstProgress(std::int64_t ms);
  void PollHeartbeat();
  void Settle(const std::vector<std::size_t>& notices);  // logs them; saves
  // A notice the trainer could not save on: the newest good checkpoint and the steps lost.
  void NameWhatWasLost(NoticeRecord& n) const;
  void TrackWaiting(supervisor::Phase phase);
  void TakeMirrored();  // io thread: what the feed holds, into the ledger and the durability view
  void DetachMirror();
  void LogBudgetUnknowns();
  // ---- output ----
  std::optional<std::filesystem::path> WriteRunReport();
  std::string RenderMetrics() const;
  void UpdateStatus();
  std::int64_t NowMs() const { return UnixMillis(clock_->WallNow()); }
  static double Seconds(SteadyTime::duration d) { return std::chrono::duration<double>(d).count(); }

  const config::JobConfig& job_;                 // outlives us
  std::optional<MetricsEndpoint> endpoint_;      // metrics on, with its token
  SystemdStatus systemd_;                        // sd_notify and the watchdog
  ReportWriter write_report_;                    // the report at OnExit (empty: none)
  supervisor::RunControl* control_ = nullptr;    // from OnStart
  Clock* clock_ = nullptr;                       // the run's; from OnStart
  std::optional<RunRecord> record_;              // run.json and the attempts; from OnStart
  std::optional<RunHooks> hooks_;                // the job's hooks; from OnStart
  std::optional<state::AttemptRecord> current_;  // the attempt in progress
  supervisor::Phase phase_ = supervisor::Phase::kIdle;
  SteadyTime trainer_started_{};                          // the current trainer's start
  std::optional<SteadyTime> notice_at_, stop_signal_at_;  // the last notice; the stop signal
  std::optional<std::size_t> awaiting_signal_;            // notice index without signal yet
  std::optional<double> last_notice_to_signal_, last_grace_used_;
  std::map<std::pair<std::string, std::string>, int> hook_runs_;  // (hook, outcome) -> runs
  std::unique_ptr<MetricsServer> metrics_;
  std::unique_ptr<preemption::InstanceFactsQuery> facts_;  // until it answers or we exit
  std::unique_ptr<Timer> heartbeat_, budget_timer_;        // run.json refresh; the budget check
  std::unique_ptr<Timer> progress_timer_;                  // polls health.heartbeat_file until it moves
  std::optional<std::regex> progress_;                     // health.progress_pattern
  bool awaiting_progress_ = false;                         // the current attempt has shown none yet
  std::optional<std::uint64_t> last_step_;                 // the current attempt's last progress_pattern step
  // The newest good checkpoint known (the selection's choice, then each new good one): name, step.
  std::optional<std::pair<std::string, std::uint64_t>> newest_good_;
  std::optional<std::int64_t> waiting_since_;  // multi-node: joining or finishing since
  int group_world_ = 1;
  std::shared_ptr<MirrorFeed> mirror_feed_;  // with a mirror
  std::optional<GpuSampler> gpu_;            // NVML, on its own thread
  // The newest checkpoint on the mirror (step, unix ms it got there) and the planner's last verdict.
  std::optional<std::pair<std::uint64_t, std::int64_t>> newest_durable_;
  std::optional<mirror::DurabilityPlan> durability_;
  std::vector<DurableAt> durable_;  // every checkpoint found on the mirror by this run, in order
  bool budget_stopped_ = false, exited_ = false;
};

}  // namespace spotvisor::telemetry

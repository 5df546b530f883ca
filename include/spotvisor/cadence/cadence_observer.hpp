// Periodic checkpoint requests (`cadence`): sends signals.checkpoint once the trainer has
// run a full interval (a trainer still importing has no handler yet, and the signal's
// default action would kill it), never while a stop is in progress, one request at a
// time. Measures each request's cost (request → new good checkpoint, from the watcher) and
// size, journals them in checkpoints.jsonl, and in adaptive mode recomputes the interval
// from C and M (cadence_policy.hpp), logging every change. A checkpoint-only notice (AWS
// rebalance) is measured like a request; any new checkpoint restarts the period. Time and
// timers come from RunControl::clock(). io thread.
#pragma once

#include <boost/asio/thread_pool.hpp>
#include <chrono>
#include <memory>
#include <optional>
#include <string>

#include "spotvisor/cadence/cadence_policy.hpp"
#include "spotvisor/cadence/checkpoint_journal.hpp"
#include "spotvisor/checkpoint_watch/checkpoint_watcher.hpp"
#include "spotvisor/supervisor/run_observer.hpp"

namespace spotvisor::cadence {

class CadenceObserver final : public supervisor::RunObserver {
 public:
  // `watcher` may be null (no checkpoints.dir: requests are sent but not measured).
  // `provider` names the prior M ("aws", ...; see MtbiPriorFor).
  CadenceObserver(const config::JobConfig& job, checkpoint_watch::CheckpointWatcher* watcher,
                  const std::string& provider);
  ~CadenceObserver() override;  // waits for journal appends in flight

  void OnStart(supervisor::RunControl& control) override;
  void OnAttemptStarted(const supervisor::SpawnAction& start, pid_t pid) override;
  void OnAttemptEnded(const state::AttemptRecord& record) override;
  void OnNotice(const preemption::Notice& notice) override;
  void OnSignalSent(int signo, config::SignalTarget to) override;
  void OnPhase(supervisor::Phase phase) override;
  void OnExit(int code, const std::string& message) override;

  // Any thread (the mirror's uploads), from OnStart on: the planner's verdict after an
  // upload (does save + `upload` fit the warning window?). Handled on the io thread: where
  // it does not fit, the upload counts in the adaptive interval's C.
  void PostDurabilityPlan(Duration upload, bool fits);

  const CadencePolicy& policy() const { return policy_; }

 private:
  struct Pending {
    std::string reason;      // cadence | adaptive | notice ...
    SteadyTime at;           // when we asked
    WallTime wall;           // the same, on the wall clock
    bool delivered = false;  // signals.checkpoint reached a process
  };

  void ArmAt(SteadyTime at);
  void OnTimer();
  void OnCheckpoint(const checkpoint_watch::CheckpointVerdict& checkpoint);
  void Request(const std::string& reason, bool signal);
  void Journal(CheckpointRecord record);
  void NoteIntervalChange(const std::string& why);
  Duration RunTimeSoFar() const;

  const config::JobConfig& job_;                  // not owned
  checkpoint_watch::CheckpointWatcher* watcher_;  // not owned; may be null
  CadencePolicy policy_;                          // interval, C, M
  supervisor::RunControl* control_ = nullptr;     // set in OnStart
  Clock* clock_ = nullptr;                        // control_->clock(), set in OnStart
  std::unique_ptr<Timer> timer_;                  // the next request
  supervisor::Phase phase_ = supervisor::Phase::kIdle;
  int attempt_ = 0;                     // the running attempt, 0 = none
  SteadyTime attempt_started_{};        // when it started
  std::optional<Pending> pending_;      // a request not yet answered
  Duration interval_{0};                // the interval last logged
  bool stopped_ = false;                // OnExit came
  boost::asio::thread_pool writer_{1};  // journal appends (fdatasync off the io thread)
};

}  // namespace spotvisor::cadence

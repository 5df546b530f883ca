// The supervisor policy's stops (see fsm.hpp): a stop request in every phase, the timers
// (grace, kill, backoff, selection, drained, join, a lingering launcher), a checkpoint request, a cleared notice,
// and a launcher whose workers are gone. A deferred stop is in fsm_defer.cpp, the rest of the Fsm in fsm.cpp.
#include <algorithm>

#include "fsm_detail.hpp"
#include "spotvisor/config/signals.hpp"
#include "spotvisor/preemption/time_format.hpp"
#include "spotvisor/supervisor/fsm.hpp"
#include "spotvisor/supervisor/notice_grace.hpp"

namespace spotvisor::supervisor {

using fsm_detail::Note;
using fsm_detail::Precedence;
using fsm_detail::ReasonName;
using std::chrono::milliseconds;

std::vector<Action> Fsm::OnStopRequested(const StopRequestedEvent& e, TimePoint now) {
  const bool by_signal = e.reason == StopReason::kSignal;
  if (e.reason == StopReason::kNotice) notice_cleared_early_ = false;  // a notice is in force again
  // A peer's stop ends a running trainer's epoch (one whose stop waits for a checkpoint too),
  // or one this node finished and waits on; with no trainer there is nothing to stop (the
  // next start is agreed with the group anyway).
  if (e.reason == StopReason::kPeer && phase_ != Phase::kRunning && phase_ != Phase::kDeferred &&
      phase_ != Phase::kFinishing) {
    return {};
  }
  switch (phase_) {
    case Phase::kIdle:
    case Phase::kSelecting:
      if (Precedence(e.reason) > Precedence(pending_stop_)) pending_stop_ = e.reason;
      return {Note(LogLevel::kInfo, std::string("event=stop_requested reason=") + ReasonName(e.reason) + " detail=\"" +
                                        e.detail + "\" phase=selecting")};
    case Phase::kBackoff:
      return StopInBackoff(e, now);
    case Phase::kDrained:
      if (by_signal)
        return Finish(ExitCode::kStopped, "stopped on request after a preemption notice; the job is resumable");
      // A new notice while a cleared one waited out provider.resume_after: no resume.
      if (e.reason == StopReason::kNotice) return {CancelTimerAction{TimerKind::kResume}};
      return {};
    case Phase::kFinishing:
      // This node's trainer is done, but not the group's: a peer that stopped or failed
      // needs this node for the group's next start; nothing of ours runs to stop.
      if (e.reason == StopReason::kPeer) {
        return Select(now,
                      {CancelTimerAction{TimerKind::kJoin},
                       Note(LogLevel::kWarning, "event=group_not_finished detail=\"" + e.detail +
                                                    " after this node's trainer finished: rejoining the group\"")});
      }
      if (by_signal) {
        return Finish(ExitCode::kStopped,
                      "stopped on request while waiting for the other nodes to finish; the job is resumable",
                      {CancelTimerAction{TimerKind::kJoin}});
      }
      return {};  // a notice, a hang or the budget: no trainer runs here, the group's decides
    case Phase::kJoining:
      return StopWhileJoining(e, now);
    case Phase::kSpare:
      // No trainer and no rank: nothing to save or tell the group.
      if (by_signal) return Finish(ExitCode::kStopped, "stopped on request while waiting as a spare");
      if (e.reason == StopReason::kBudget) return Finish(ExitCode::kBudget, "the cost budget is exhausted (a spare)");
      if (e.reason == StopReason::kNotice) {
        return Drain(now,
                     Note(LogLevel::kWarning, "event=drained reason=notice detail=\"notice while waiting as a spare\""),
                     {ReleaseRankAction{}});
      }
      return {};
    case Phase::kStopping:
      return StopWhileStopping(e, now);
    case Phase::kRunning:
      return StopTheTrainer(e, now);
    case Phase::kDeferred:
      return StopWhileDeferred(e, now);
    case Phase::kFinished:
      return {};
  }
  return {};
}

// Waiting to restart: a signal or the budget ends the run, a notice drains it.
std::vector<Action> Fsm::StopInBackoff(const StopRequestedEvent& e, TimePoint now) {
  if (e.reason == StopReason::kSignal) {
    return Finish(ExitCode::kStopped, "stopped on request while waiting to restart; the job is resumable",
                  {CancelTimerAction{TimerKind::kBackoff}});
  }
  if (e.reason == StopReason::kNotice) {
    return Drain(now,
                 Note(LogLevel::kWarning,
                      "event=drained reason=notice detail=\"notice during backoff; no new trainer is started\""),
                 {CancelTimerAction{TimerKind::kBackoff}});
  }
  if (e.reason == StopReason::kBudget) {
    return Finish(ExitCode::kBudget, "the cost budget is exhausted while waiting to restart",
                  {CancelTimerAction{TimerKind::kBackoff}});
  }
  return {};
}

// No trainer yet and nothing of ours in flight: a stop acts at once. The group hears of it
// (its coordinator takes back this node's join) unless nothing changes here.
std::vector<Action> Fsm::StopWhileJoining(const StopRequestedEvent& e, TimePoint now) {
  const bool by_signal = e.reason == StopReason::kSignal;
  std::vector<Action> actions{CancelTimerAction{TimerKind::kJoin}};
  if (by_signal || e.reason == StopReason::kBudget || e.reason == StopReason::kNotice) {
    actions.push_back(PublishStopAction{std::string(ReasonName(e.reason)) + ": " + e.detail, e.grace_cap});
  }
  if (by_signal) {
    return Finish(ExitCode::kStopped, "stopped on request before the trainer started; the job is resumable",
                  std::move(actions));
  }
  if (e.reason == StopReason::kBudget) {
    return Finish(ExitCode::kBudget, "the cost budget is exhausted; the trainer was not started again",
                  std::move(actions));
  }
  if (e.reason == StopReason::kNotice) {
    return Drain(now,
                 Note(LogLevel::kWarning,
                      "event=drained reason=notice detail=\"notice before the trainer started; not starting it\""),
                 std::move(actions));
  }
  return {};
}

// A stop while the trainer is already stopping: a notice outranks a hang's stop, and a
// second SIGINT/SIGTERM means "now".
std::vector<Action> Fsm::StopWhileStopping(const StopRequestedEvent& e, TimePoint now) {
  const bool by_signal = e.reason == StopReason::kSignal;
  if (e.reason == StopReason::kNotice && stop_reason_ == StopReason::kHang) {
    // The machine is going away: the hung trainer's end is a drain, not a restart, and
    // the notice's deadline may be nearer than the hang stop's grace.
    stop_reason_ = StopReason::kNotice;
    std::vector<Action> actions{
        Note(LogLevel::kWarning, "event=stop_reason_changed from=hang to=notice detail=\"" + e.detail + "\"")};
    if (e.grace_cap && now + *e.grace_cap < grace_at_) {
      grace_at_ = now + std::max(milliseconds(0), *e.grace_cap);
      actions.push_back(ArmTimerAction{TimerKind::kGrace, grace_at_});
    }
    return actions;
  }
  if (by_signal) {
    stop_requests_ += 1;
    // A second SIGINT/SIGTERM means "now": no more grace.
    if (stop_reason_ != StopReason::kSignal) stop_reason_ = StopReason::kSignal;
    if (stop_requests_ >= 2) {
      launchers_held_ = false;  // SIGKILL ends paused processes too
      launcher_released_ = false;
      launcher_runs_for_workers_ = false;
      return {Note(LogLevel::kWarning, "event=stop_escalated detail=\"second stop request: SIGKILL to the group now\""),
              CancelTimerAction{TimerKind::kGrace}, CancelTimerAction{TimerKind::kLauncher}, KillGroupAction{},
              ArmTimerAction{TimerKind::kKill, now + job_.signals.kill_timeout}};
    }
  }
  return {};
}

// The running trainer is asked to stop: the group first, then the signal and its grace.
std::vector<Action> Fsm::StopTheTrainer(const StopRequestedEvent& e, TimePoint now) {
  const bool by_signal = e.reason == StopReason::kSignal;
  phase_ = Phase::kStopping;
  stop_reason_ = e.reason;
  stop_detail_ = e.detail;
  stop_requests_ = by_signal ? 1 : 0;
  std::chrono::milliseconds grace = job_.signals.grace;
  if (e.grace_cap) grace = std::max(std::chrono::milliseconds(0), std::min(grace, *e.grace_cap));
  const auto to = job_.signals.Recipients();
  std::vector<Action> actions;
  // The group first: every other node's trainer stops too, with this notice's deadline.
  if (e.reason != StopReason::kPeer) {
    actions.push_back(PublishStopAction{std::string(ReasonName(e.reason)) + ": " + e.detail, e.grace_cap});
  }
  actions.push_back(
      Note(LogLevel::kWarning, std::string("event=stopping reason=") + ReasonName(e.reason) + " detail=\"" + e.detail +
                                   "\" signal=" + config::SignalName(job_.signals.on_notice) +
                                   " target=" + config::ToString(to) + " grace=" + FormatDuration(grace)));
  // A launcher is held before its workers hear of the stop, so that none of them can exit
  // into a launcher that restarts it or starts its own kill timer.
  launchers_held_ = to == config::SignalTarget::kWorkers;
  launcher_runs_for_workers_ = false;
  if (launchers_held_) actions.push_back(HoldLaunchersAction{});
  actions.push_back(SignalAction{job_.signals.on_notice, to});
  if (launchers_held_) {
    actions.push_back(WatchWorkersAction{});
    workers_cpu_.reset();
    workers_stall_told_ = false;
  }
  grace_at_ = now + grace;
  actions.push_back(ArmTimerAction{TimerKind::kGrace, grace_at_});
  return actions;
}

// "Checkpoint now" never ends a trainer: with no process that catches the signal, nothing
// is sent, and the log says so once per attempt at warning level (a cadence would say it
// every interval), later ones at debug.
std::vector<Action> Fsm::OnCheckpointRequested(const CheckpointRequestedEvent& e) {
  if (phase_ != Phase::kRunning && phase_ != Phase::kDeferred) {
    return {Note(LogLevel::kInfo,
                 "event=checkpoint_request_ignored detail=\"" + e.detail + "\" reason=\"no running trainer\"")};
  }
  const std::string signal = config::SignalName(job_.signals.checkpoint);
  if (e.nobody_catches) {
    const LogLevel level = skip_told_ ? LogLevel::kDebug : LogLevel::kWarning;
    skip_told_ = true;
    return {Note(level, "event=checkpoint_request_skipped detail=\"" + e.detail + "\" reason=\"no process catches " +
                            signal + "\" target=" + config::ToString(job_.signals.Recipients()))};
  }
  return {Note(LogLevel::kInfo, "event=checkpoint_requested detail=\"" + e.detail + "\" signal=" + signal),
          SignalAction{job_.signals.checkpoint, job_.signals.Recipients(), /*only_to_handlers=*/true}};
}

std::vector<Action> Fsm::OnNoticeCleared(TimePoint now) {
  if (phase_ == Phase::kSelecting && pending_stop_ == StopReason::kNotice) {
    pending_stop_ = StopReason::kNone;
    return {Note(LogLevel::kInfo, "event=notice_cleared detail=\"the notice went away before the trainer started\"")};
  }
  if (phase_ == Phase::kStopping && stop_reason_ == StopReason::kNotice) {
    // The trainer is still saving: the clear is kept for when it has stopped (Drain).
    notice_cleared_early_ = true;
    return {Note(LogLevel::kInfo,
                 "event=notice_cleared detail=\"the notice went away while the trainer stopped for it: resuming once "
                 "it has\"")};
  }
  if (phase_ == Phase::kDeferred && !deferred_for_growth_) {
    phase_ = Phase::kRunning;
    stop_reason_ = StopReason::kNone;
    std::vector<Action> actions{
        CancelTimerAction{TimerKind::kDefer}, CancelTimerAction{TimerKind::kHandlers},
        Note(LogLevel::kInfo,
             "event=notice_cleared detail=\"the notice went away while its stop was deferred: the trainer runs on\"")};
    Thaw(actions);
    return actions;
  }
  if (phase_ != Phase::kDrained) return {};
  const auto wait = job_.provider.resume_after;
  if (wait.count() <= 0) return Resume(now);
  return {Note(LogLevel::kInfo, "event=notice_cleared resume_in=" + FormatDuration(wait)),
          ArmTimerAction{TimerKind::kResume, now + wait}};
}

std::vector<Action> Fsm::Resume(TimePoint now) {
  return Select(now,
                {CancelTimerAction{TimerKind::kDrained}, CancelTimerAction{TimerKind::kResume},
                 Note(LogLevel::kWarning,
                      "event=resume_after_notice detail=\"the notice cleared and the machine is alive: resuming\"")});
}

std::vector<Action> Fsm::OnNotice(const StopRequestedEvent& e, TimePoint now) {
  const NoticeGrace grace = GraceForNotice(e.notice->left, job_.provider);
  StopRequestedEvent capped = e;
  capped.grace_cap = grace.cap;
  capped.notice.reset();
  std::vector<Action> actions;
  if (grace.deadline_near) {
    actions.push_back(
        Note(LogLevel::kWarning,
             "event=notice_deadline_near warning_ms=" + std::to_string(grace.window.count()) +
                 " grace_cap=" + FormatDuration(grace.cap) + " detail=\"the deadline " +
                 (grace.window.count() <= 0 ? "has already passed" : "is nearer than provider.safety_margin") +
                 " (clock skew or a late notice): the trainer still gets provider.min_grace\""));
  }
  auto more = phase_ == Phase::kRunning ? MaybeDefer(e, grace.cap, grace.deadline_near, now) : std::vector<Action>{};
  if (more.empty()) more = OnStopRequested(capped, now);
  actions.insert(actions.end(), more.begin(), more.end());
  return actions;
}

// Each timer means something only in its phase; outside it, it is a leftover and does nothing.
std::vector<Action> Fsm::OnTimer(const TimerFiredEvent& e, TimePoint now) {
  switch (e.kind) {
    case TimerKind::kGrace:
      return phase_ == Phase::kStopping ? OnGraceExpired(now) : std::vector<Action>{};
    case TimerKind::kKill:
      if (phase_ != Phase::kStopping && phase_ != Phase::kRunning) return {};
      return Finish(ExitCode::kFailed,
                    "the trainer's process group survived SIGKILL for " + FormatDuration(job_.signals.kill_timeout) +
                        " (a process stuck in the kernel?); giving up rather than starting a second trainer");
    case TimerKind::kBackoff:
      return phase_ == Phase::kBackoff ? Select(now) : std::vector<Action>{};
    case TimerKind::kSelect:
      return phase_ == Phase::kSelecting ? OnSelectTimeout() : std::vector<Action>{};
    case TimerKind::kJoin:
      return OnJoinTimeout();
    case TimerKind::kLauncher:
      return phase_ == Phase::kStopping && launcher_released_ ? OnLauncherLingers(now) : std::vector<Action>{};
    case TimerKind::kDrained:
      return phase_ == Phase::kDrained ? OnDrainedTimeout(now) : std::vector<Action>{};
    case TimerKind::kResume:
      return phase_ == Phase::kDrained ? Resume(now) : std::vector<Action>{};
    case TimerKind::kDefer:
      return phase_ == Phase::kDeferred ? OnDeferTimer(now) : std::vector<Action>{};
    case TimerKind::kHandlers:
      return phase_ == Phase::kDeferred ? std::vector<Action>{SampleHandlersAction{}} : std::vector<Action>{};
  }
  return {};
}

std::vector<Action> Fsm::OnGraceExpired(TimePoint now) {
  std::vector<Action> actions{
      Note(LogLevel::kWarning,
           "event=grace_expired detail=\"the trainer did not stop within the grace window: SIGKILL to the group\"")};
  if (launchers_held_) actions.push_back(ReleaseLaunchersAction{SIGTERM});
  launchers_held_ = false;
  launcher_released_ = false;
  launcher_runs_for_workers_ = false;
  actions.push_back(CancelTimerAction{TimerKind::kLauncher});
  actions.push_back(KillGroupAction{});
  actions.push_back(ArmTimerAction{TimerKind::kKill, now + job_.signals.kill_timeout});
  return actions;
}

std::vector<Action> Fsm::OnJoinTimeout() {
  if (phase_ == Phase::kFinishing) {
    return Finish(ExitCode::kStopped, "this node's trainer finished, but not every node's within " +
                                          FormatDuration(job_.coordination.join_timeout) + "; the job is resumable");
  }
  if (phase_ != Phase::kJoining) return {};
  return Finish(ExitCode::kStopped, "the group did not agree on a start within " +
                                        FormatDuration(job_.coordination.join_timeout) + "; the job is resumable");
}

// Its workers saved and stopped, yet it is still here (torch 1.13's agent, caught by our
// SIGTERM inside its own shutdown, waits on its rendezvous thread; a launcher that restarts
// them). Nothing is left to save: SIGKILL now, not at the grace's end.
std::vector<Action> Fsm::OnLauncherLingers(TimePoint now) {
  launcher_released_ = false;
  return {Note(LogLevel::kWarning, "event=launcher_lingers timeout=" + FormatDuration(job_.signals.kill_timeout) +
                                       " detail=\"every worker has stopped but the launcher did not exit: SIGKILL to "
                                       "the group\""),
          CancelTimerAction{TimerKind::kGrace}, KillGroupAction{},
          ArmTimerAction{TimerKind::kKill, now + job_.signals.kill_timeout}};
}

// The notice neither took the machine nor cleared (a rebalance recommendation with
// provider.rebalance: stop, a maintenance event that never came): the machine is evidently
// staying, so it trains again rather than idling billed.
std::vector<Action> Fsm::OnDrainedTimeout(TimePoint now) {
  return Select(now, {CancelTimerAction{TimerKind::kResume},
                      Note(LogLevel::kWarning,
                           "event=drained_timeout timeout=" + FormatDuration(job_.provider.drained_timeout) +
                               " detail=\"the machine is still here and the notice never cleared: resuming\"")});
}

// The selection thread is stuck (a hung mount, a mirror restore that never returns): say
// so and end rather than wait forever or start without knowing the newest checkpoint. A
// stop that came meanwhile decides the code, as it would have at the end of the selection.
std::vector<Action> Fsm::OnSelectTimeout() {
  const std::string waited = "the checkpoint selection did not finish within checkpoints.select_timeout = " +
                             FormatDuration(job_.checkpoints.select_timeout);
  std::vector<Action> actions{
      Note(LogLevel::kError, "event=select_timeout timeout=" + FormatDuration(job_.checkpoints.select_timeout) +
                                 " dir=" + log::Quote(job_.checkpoints.dir ? job_.checkpoints.dir->string() : "none"))};
  switch (pending_stop_) {
    case StopReason::kSignal:
      return Finish(ExitCode::kStopped,
                    "stopped on request before the trainer started (" + waited + "); the job is resumable",
                    std::move(actions));
    case StopReason::kBudget:
      return Finish(ExitCode::kBudget, "the cost budget is exhausted; the trainer was not started again",
                    std::move(actions));
    case StopReason::kNotice:
      return Finish(ExitCode::kStopped,
                    "stopped for a preemption notice before the trainer started (" + waited + "); the job is resumable",
                    std::move(actions));
    case StopReason::kPeer:  // never pending
    case StopReason::kHang:
    case StopReason::kNone:
      break;
  }
  const std::string where =
      job_.checkpoints.dir ? " (is " + job_.checkpoints.dir->string() + " on a stuck filesystem?)" : "";
  return Finish(
      ExitCode::kFailed,
      "giving up: " + waited + where + "; not starting the trainer without knowing the newest good checkpoint",
      std::move(actions));
}

// The launcher may now exit as its workers did; if it has not within signals.kill_timeout,
// kLauncher ends it. One released early for its stalled workers got no SIGTERM: it sees them
// exit and ends by itself (exit 0 when every worker did), or kLauncher ends it too.
std::vector<Action> Fsm::OnWorkersGone(TimePoint now) {
  if (phase_ != Phase::kStopping || !(launchers_held_ || launcher_runs_for_workers_)) return {};
  const bool held = launchers_held_;
  launchers_held_ = false;
  launcher_runs_for_workers_ = false;
  launcher_released_ = true;
  if (!held) {
    return {Note(LogLevel::kInfo,
                 "event=workers_gone detail=\"every worker has stopped; the launcher, already "
                 "running, ends by itself\""),
            ArmTimerAction{TimerKind::kLauncher, now + job_.signals.kill_timeout}};
  }
  return {Note(LogLevel::kInfo, "event=workers_gone detail=\"every worker has stopped: SIGTERM to the launcher\""),
          ReleaseLaunchersAction{SIGTERM}, ArmTimerAction{TimerKind::kLauncher, now + job_.signals.kill_timeout}};
}

// Every worker blocked without CPU while the launcher is held: in torch 2.x a worker still
// joining the group waits on the rendezvous store inside the launcher, so holding it would
// cost the whole grace and then a SIGKILL. The launcher runs again (no signal: the workers
// have theirs), they join, reach a step, see the stop and save.
std::vector<Action> Fsm::OnWorkersSampled(const WorkersSampledEvent& e, TimePoint now) {
  if (phase_ != Phase::kStopping) return {};
  if (!workers_cpu_ || *workers_cpu_ != e.cpu_ticks || !e.all_in_socket_waits) {
    workers_cpu_ = e.cpu_ticks;
    workers_busy_at_ = now;
    return {};
  }
  if (workers_stall_told_ || now - workers_busy_at_ < kWorkersStallWindow) return {};
  workers_stall_told_ = true;
  return OnWorkersStalled(std::chrono::duration_cast<milliseconds>(now - workers_busy_at_));
}

std::vector<Action> Fsm::OnWorkersStalled(std::chrono::milliseconds for_how_long) {
  if (!launchers_held_) return {};
  launchers_held_ = false;
  launcher_runs_for_workers_ = true;
  return {Note(LogLevel::kWarning,
               "event=launcher_released reason=workers_stalled stalled_for=" + FormatDuration(for_how_long) +
                   " detail=\"no worker used CPU while the launcher was held: they may be waiting on its "
                   "rendezvous store, so it runs again; the workers still have the stop\""),
          ReleaseLaunchersAction{0}};
}

}  // namespace spotvisor::supervisor

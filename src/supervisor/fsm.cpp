// The supervisor policy; see fsm.hpp. Invariant: at most one child exists outside kIdle,
// kBackoff, kDrained and kFinished, and an Exit action is always the last action issued.
// In this order: start, selection, attempts and backoff; the stops (a stop request in every
// phase, the timers, a checkpoint request, a cleared notice, a launcher whose workers are
// gone); the deferred stops (Phase::kDeferred).
#include "spotvisor/supervisor/fsm.hpp"

#include <algorithm>
#include <cmath>

#include "spotvisor/config/signals.hpp"
#include "spotvisor/preemption/time_format.hpp"
#include "spotvisor/supervisor/notice_grace.hpp"

namespace spotvisor::supervisor {

using std::chrono::milliseconds;

namespace {

LogAction Note(LogLevel level, std::string text) { return LogAction{level, std::move(text)}; }

const char* ReasonName(StopReason r) {
  switch (r) {
    case StopReason::kSignal:
      return "signal";
    case StopReason::kNotice:
      return "notice";
    case StopReason::kHang:
      return "hang";
    case StopReason::kBudget:
      return "budget";
    case StopReason::kPeer:
      return "peer";
    case StopReason::kNone:
      break;
  }
  return "none";
}

// Which of two stops that came before the trainer started wins: a signal (exit 75), the
// budget (exit 3), a notice (drain), a hang (nothing to stop yet).
int Precedence(StopReason r) {
  switch (r) {
    case StopReason::kSignal:
      return 4;
    case StopReason::kBudget:
      return 3;
    case StopReason::kNotice:
      return 2;
    case StopReason::kHang:
      return 1;
    case StopReason::kPeer:  // never pending: a peer's stop only stops a running trainer
    case StopReason::kNone:
      break;
  }
  return 0;
}

}  // namespace

std::string Describe(const ExitStatus& status) {
  if (status.signal != 0) return "killed by " + config::SignalName(status.signal);
  return "exit code " + std::to_string(status.code);
}

const char* PhaseName(Phase p) {
  switch (p) {
    case Phase::kIdle:
      return "idle";
    case Phase::kSelecting:
      return "selecting";
    case Phase::kJoining:
      return "joining";
    case Phase::kRunning:
      return "running";
    case Phase::kDeferred:
      return "deferred";
    case Phase::kStopping:
      return "stopping";
    case Phase::kBackoff:
      return "backoff";
    case Phase::kDrained:
      return "drained";
    case Phase::kFinishing:
      return "finishing";
    case Phase::kSpare:
      return "spare";
    case Phase::kFinished:
      return "finished";
  }
  return "?";
}

Fsm::Fsm(const config::JobConfig& job, Counters restored, std::uint64_t seed)
    : job_(job), counters_(std::move(restored)), rng_(seed) {}

std::vector<Action> Fsm::Handle(const Event& event, TimePoint now) {
  if (phase_ == Phase::kFinished) return {};
  return std::visit(
      [&](const auto& e) -> std::vector<Action> {
        using E = std::decay_t<decltype(e)>;
        if constexpr (std::is_same_v<E, StartEvent>) return OnStart(now);
        if constexpr (std::is_same_v<E, ResumeSelectedEvent>) return OnResumeSelected(e, now);
        if constexpr (std::is_same_v<E, SpawnFailedEvent>) return OnSpawnFailed(e, now);
        if constexpr (std::is_same_v<E, ChildExitedEvent>) return OnChildExited(e, now);
        if constexpr (std::is_same_v<E, StopRequestedEvent>)
          return e.notice ? OnNotice(e, now) : OnStopRequested(e, now);
        if constexpr (std::is_same_v<E, CheckpointRequestedEvent>) return OnCheckpointRequested(e);
        if constexpr (std::is_same_v<E, NoticeClearedEvent>) return OnNoticeCleared(now);
        if constexpr (std::is_same_v<E, TimerFiredEvent>) return OnTimer(e, now);
        if constexpr (std::is_same_v<E, WorkersGoneEvent>) return OnWorkersGone(now);
        if constexpr (std::is_same_v<E, WorkersSampledEvent>) return OnWorkersSampled(e, now);
        if constexpr (std::is_same_v<E, GroupAgreedEvent>) return OnGroupAgreed(e, now);
        if constexpr (std::is_same_v<E, GroupFinishedEvent>) return OnGroupFinished();
        if constexpr (std::is_same_v<E, SelectionFailedEvent>) return OnSelectionFailed(e);
        if constexpr (std::is_same_v<E, GroupSurvivedKillEvent>) return OnGroupSurvivedKill(e);
        if constexpr (std::is_same_v<E, DrainedValidatedEvent>) return OnDrainedValidated();
        if constexpr (std::is_same_v<E, GroupSpareEvent>) return OnGroupSpare(e, now);
        if constexpr (std::is_same_v<E, GroupCutOffEvent>) return OnGroupCutOff(e, now);
        if constexpr (std::is_same_v<E, CheckpointLandedEvent>) return OnCheckpointLanded(e, now);
        if constexpr (std::is_same_v<E, CheckpointWritingEvent>) return OnCheckpointWriting(e);
        if constexpr (std::is_same_v<E, GroupGrowingEvent>) return OnGroupGrowing(e, now);
        if constexpr (std::is_same_v<E, HandlersSampledEvent>) return OnHandlersSampled(e, now);
        if constexpr (std::is_same_v<E, CheckpointArrivingEvent>) return OnCheckpointArriving(e);
      },
      event);
}

std::vector<Action> Fsm::OnStart(TimePoint now) {
  if (phase_ != Phase::kIdle) return {};
  return Select(now);
}

std::vector<Action> Fsm::Select(TimePoint now, std::vector<Action> actions) {
  phase_ = Phase::kSelecting;
  actions.push_back(SelectResumeAction{});
  const auto timeout = job_.checkpoints.select_timeout;
  if (timeout.count() > 0) actions.push_back(ArmTimerAction{TimerKind::kSelect, now + timeout});
  return actions;
}

std::vector<Action> Fsm::Drain(TimePoint now, LogAction note, std::vector<Action> actions) {
  phase_ = Phase::kDrained;
  actions.push_back(std::move(note));
  actions.push_back(ValidateDrainedAction{});
  const auto timeout = job_.provider.drained_timeout;
  if (timeout.count() > 0) actions.push_back(ArmTimerAction{TimerKind::kDrained, now + timeout});
  if (notice_cleared_early_) {  // the provider withdrew the notice before the trainer had stopped
    notice_cleared_early_ = false;
    auto resume = OnNoticeCleared(now);
    actions.insert(actions.end(), resume.begin(), resume.end());
  }
  return actions;
}

std::vector<Action> Fsm::OnDrainedValidated() {
  if (phase_ != Phase::kDrained) return {};
  // The checkpoint is known good and this machine is going: a spare can take the rank now.
  if (job_.coordination.spares > 0) return {AcknowledgeNoticeAction{}, ReleaseRankAction{}};
  return {AcknowledgeNoticeAction{}};
}

std::vector<Action> Fsm::OnGroupSpare(const GroupSpareEvent& e, TimePoint now) {
  if (e.waiting) {
    if (phase_ != Phase::kJoining) return {};
    // A spare waits as long as it takes: the group is whole without it.
    phase_ = Phase::kSpare;
    return {CancelTimerAction{TimerKind::kJoin}};
  }
  if (phase_ != Phase::kSpare) return {};
  // A rank was lost and is this node's now: the checkpoints it chose from may be old.
  return Select(now);
}

// Fencing: a node whose lease lapsed may see its rank taken by a spare or a replacement, and
// two trainers of one rank must never write at once. A trainer that computes shows the
// group is still there (etcd alone is away: training goes on, as the peers' do); one that
// used under kCutOffBusyShare of a CPU while sampled is blocked, the usual fate of a rank
// whose peers are gone, and stops. The heartbeat file is not asked: a cut-off node may not
// reach the filesystem it lives on, and a stat there could hang.
std::vector<Action> Fsm::OnGroupCutOff(const GroupCutOffEvent& e, TimePoint now) {
  if (phase_ != Phase::kRunning || e.attempt != counters_.attempts) return {};
  const auto sampled = e.sampled_for.count();
  const std::string used =
      e.trainer_cpu ? std::to_string(e.trainer_cpu->count()) + " ms of CPU in " + std::to_string(sampled) + " ms"
                    : std::string("no trainer to sample");
  const bool progressing =
      e.trainer_cpu && sampled > 0 && static_cast<double>(e.trainer_cpu->count()) >= kCutOffBusyShare * sampled;
  if (progressing) {
    return {Note(LogLevel::kWarning, "event=group_cut_off trainer=progressing cpu=\"" + used +
                                         "\" detail=\"no etcd member renewed this node's lease for "
                                         "coordination.lease_ttl, but the trainer computes: training goes on\"")};
  }
  return OnStopRequested(
      StopRequestedEvent{StopReason::kPeer, std::nullopt,
                         "this node is cut off from the group (its lease lapsed) and its trainer shows no progress (" +
                             used + "): its rank can be taken, so its trainer stops"},
      now);
}

std::vector<Action> Fsm::OnSelectionFailed(const SelectionFailedEvent& e) {
  if (phase_ != Phase::kSelecting) return {};
  return Finish(ExitCode::kFailed,
                "cannot choose a checkpoint to resume from: " + e.message +
                    " (not starting from scratch while checkpoints may exist)",
                {CancelTimerAction{TimerKind::kSelect}});
}

std::vector<Action> Fsm::OnGroupSurvivedKill(const GroupSurvivedKillEvent& e) {
  // Only while a trainer's group is there to outlive anything (a late report is no news).
  if (phase_ != Phase::kRunning && phase_ != Phase::kStopping && phase_ != Phase::kDeferred) return {};
  return Finish(ExitCode::kFailed, "processes of the trainer's group " + std::to_string(e.pgid) +
                                       " survive SIGKILL; refusing to start a second trainer");
}

std::vector<Action> Fsm::OnResumeSelected(const ResumeSelectedEvent& e, TimePoint now) {
  if (phase_ != Phase::kSelecting) return {};
  std::vector<Action> actions{CancelTimerAction{TimerKind::kSelect}};
  if (pending_stop_ == StopReason::kSignal) {
    return Finish(ExitCode::kStopped, "stopped on request before the trainer started; the job is resumable",
                  std::move(actions));
  }
  if (pending_stop_ == StopReason::kBudget) {
    return Finish(ExitCode::kBudget, "the cost budget is exhausted; the trainer was not started again",
                  std::move(actions));
  }
  if (pending_stop_ == StopReason::kNotice) {
    pending_stop_ = StopReason::kNone;  // consumed: a later clear resumes, and that start is not drained again
    return Drain(
        now,
        Note(LogLevel::kWarning,
             "event=drained reason=notice detail=\"notice arrived before the trainer started; not starting it\""),
        std::move(actions));
  }
  // Every start is agreed with the group, a single node's included (one code path).
  phase_ = Phase::kJoining;
  actions.push_back(ProposeResumeAction{e.good, counters_.attempts + 1});
  actions.push_back(ArmTimerAction{TimerKind::kJoin, now + job_.coordination.join_timeout});
  return actions;
}

std::vector<Action> Fsm::OnGroupAgreed(const GroupAgreedEvent& e, TimePoint now) {
  if (phase_ != Phase::kJoining) return {};  // a late answer: the start was given up
  std::vector<Action> actions{CancelTimerAction{TimerKind::kJoin}};
  const auto step = e.point ? std::optional<std::uint64_t>(e.point->step) : std::nullopt;
  if (std::string why = CountProgress(step); !why.empty()) return Finish(ExitCode::kFailed, why, std::move(actions));
  // A multi-node job has one failure budget: the group's count when it is higher.
  counters_.failures = std::max(counters_.failures, e.group_failures);
  counters_.last_resume_step = step;
  counters_.last_attempt_failed = false;  // Fail() says otherwise when this one fails
  counters_.attempts += 1;
  phase_ = Phase::kRunning;
  world_ = e.place.world;
  started_at_ = now;
  stop_reason_ = StopReason::kNone;
  stop_requests_ = 0;
  skip_told_ = false;
  actions.push_back(SpawnAction{e.point, counters_.attempts, counters_.attempts - 1, e.place});
  return actions;
}

// Progress is a newer good checkpoint: a higher step than the last start resumed from
// (a fixed-name checkpoint's version carries its step the same way). The rule exists for
// crash loops that make none, so only a restart after a failure or a hang counts; one
// after a notice, a stop request or a peer's stop never does, though its progress still
// resets the streak.
std::string Fsm::CountProgress(std::optional<std::uint64_t> step) {
  const int limit = job_.restart.no_progress_limit;
  if (counters_.attempts == 0 || limit <= 0) return {};
  const bool advanced = step && (!counters_.last_resume_step || *step > *counters_.last_resume_step);
  if (advanced) {
    counters_.no_progress_streak = 0;
    return {};
  }
  if (!counters_.last_attempt_failed) return {};
  counters_.no_progress_streak += 1;
  if (counters_.no_progress_streak < limit) return {};
  const std::string at = step ? "step " + std::to_string(*step) : "no checkpoint";
  return "giving up: " + std::to_string(counters_.no_progress_streak) +
         " restarts in a row without progress (each resumed from " + at +
         "; restart.no_progress_limit = " + std::to_string(limit) + ")";
}

// Every node's trainer succeeded in this epoch: the job is done.
std::vector<Action> Fsm::OnGroupFinished() {
  // A spare is not needed any more: the job is done, here too (a Job's pods all end).
  if (phase_ == Phase::kSpare)
    return Finish(ExitCode::kDone,
                  "the job finished: every rank's trainer exited with success while this node "
                  "waited as a spare");
  if (phase_ != Phase::kFinishing) return {};
  return Finish(ExitCode::kDone,
                "the job finished: every node's trainer (" + std::to_string(world_) + " nodes) exited with success",
                {CancelTimerAction{TimerKind::kJoin}});
}

std::vector<Action> Fsm::OnSpawnFailed(const SpawnFailedEvent& e, TimePoint now) {
  if (phase_ != Phase::kRunning) return {};
  std::vector<Action> actions{Note(LogLevel::kError, "event=spawn_failed error=\"" + e.message + "\""),
                              PublishStopAction{"trainer could not start: " + e.message, std::nullopt}};
  auto more = Fail(ExitStatus{127, 0}, Outcome::kSpawnFailed, now);
  std::get<PublishStopAction>(actions.back()).failures = counters_.failures;
  actions.insert(actions.end(), more.begin(), more.end());
  return actions;
}

bool Fsm::IsSuccess(const ExitStatus& status) const {
  if (status.signal != 0) return false;
  const auto& codes = job_.job.success_exit_codes;
  return std::find(codes.begin(), codes.end(), status.code) != codes.end();
}

std::vector<Action> Fsm::OnChildExited(const ChildExitedEvent& e, TimePoint now) {
  if (phase_ != Phase::kRunning && phase_ != Phase::kStopping && phase_ != Phase::kDeferred) return {};
  std::vector<Action> actions{CancelTimerAction{TimerKind::kGrace}, CancelTimerAction{TimerKind::kKill},
                              CancelTimerAction{TimerKind::kLauncher}};
  if (phase_ == Phase::kDeferred) {
    actions.push_back(CancelTimerAction{TimerKind::kDefer});
    actions.push_back(CancelTimerAction{TimerKind::kHandlers});
  }
  launchers_held_ = false;  // they are gone with the group
  frozen_ = false;
  launcher_released_ = false;
  launcher_runs_for_workers_ = false;
  const ExitStatus& st = e.status;
  // A trainer that finished while its stop was deferred is done; any other end is the notice's.
  const StopReason reason = phase_ == Phase::kDeferred && IsSuccess(st) ? StopReason::kNone : stop_reason_;
  stop_reason_ = StopReason::kNone;
  switch (reason) {
    case StopReason::kNone:
      return OnEndedByItself(st, now, std::move(actions));
    case StopReason::kSignal:
      actions.push_back(AttemptEndedAction{st, Outcome::kStopped, "exit 75"});
      return Finish(ExitCode::kStopped,
                    "stopped on request; the trainer ended with " + Describe(st) + "; the job is resumable",
                    std::move(actions));
    case StopReason::kBudget:
      actions.push_back(AttemptEndedAction{st, Outcome::kBudget, "exit 3"});
      return Finish(ExitCode::kBudget, "the cost budget is exhausted; the trainer was stopped (" + Describe(st) + ")",
                    std::move(actions));
    case StopReason::kNotice:
      counters_.preemptions += 1;
      actions.push_back(AttemptEndedAction{st, Outcome::kPreempted, "drained"});
      return Drain(
          now,
          Note(LogLevel::kWarning, "event=drained trainer=\"" + Describe(st) +
                                       "\" detail=\"waiting for the machine to go away, or for the notice to clear\""),
          std::move(actions));
    case StopReason::kHang: {
      auto more = Fail(st, Outcome::kHang, now);
      actions.insert(actions.end(), more.begin(), more.end());
      return actions;
    }
    case StopReason::kPeer:
      // Not this node's doing: nothing is counted, and the next start is the group's.
      actions.push_back(AttemptEndedAction{st, Outcome::kPeerStopped, "rejoin the group", stop_detail_});
      return Select(now, std::move(actions));
  }
  return actions;
}

// The trainer ended with no stop asked of it: done, or a failure.
std::vector<Action> Fsm::OnEndedByItself(const ExitStatus& st, TimePoint now, std::vector<Action> actions) {
  if (IsSuccess(st) && world_ > 1) {
    // Done only when every node's trainer is: until then a peer may still fail, and the
    // group then needs this node again.
    phase_ = Phase::kFinishing;
    actions.push_back(AttemptEndedAction{st, Outcome::kDone, "wait for every node to finish"});
    actions.push_back(Note(LogLevel::kInfo, "event=group_finishing nodes=" + std::to_string(world_) +
                                                " detail=\"this node's trainer finished; waiting for the others'\""));
    actions.push_back(PublishDoneAction{});
    actions.push_back(ArmTimerAction{TimerKind::kJoin, now + job_.coordination.join_timeout});
    return actions;
  }
  if (IsSuccess(st)) {
    actions.push_back(AttemptEndedAction{st, Outcome::kDone, "exit 0"});
    return Finish(ExitCode::kDone, "the job finished: the trainer exited with " + Describe(st), std::move(actions));
  }
  // Not a success: the group stops too (its collectives would hang), and the failure counts
  // once for the whole job.
  auto more = Fail(st, Outcome::kFailed, now);
  actions.push_back(PublishStopAction{"trainer failed: " + Describe(st), std::nullopt, counters_.failures});
  actions.insert(actions.end(), more.begin(), more.end());
  return actions;
}

std::vector<Action> Fsm::Fail(const ExitStatus& status, Outcome outcome, TimePoint now) {
  std::vector<Action> actions;
  counters_.last_attempt_failed = true;
  const auto& r = job_.restart;
  if (now - started_at_ >= r.backoff.reset_after) counters_.consecutive_failures = 0;
  counters_.consecutive_failures += 1;
  std::string why;
  if (outcome == Outcome::kHang) {
    counters_.hangs += 1;
    if (counters_.hangs > r.max_hangs) {
      why = "giving up: the trainer hung " + std::to_string(counters_.hangs) +
            " times (restart.max_hangs = " + std::to_string(r.max_hangs) + ")";
    }
  } else {
    counters_.failures += 1;
    // Only the last crash_loop.failures failures can decide: the list stays that short
    // (and empty with the detection off), however long the job restarts.
    if (r.crash_loop.failures > 0) counters_.recent_failures.push_back(now);
    while (!counters_.recent_failures.empty() &&
           (now - counters_.recent_failures.front() > r.crash_loop.window ||
            static_cast<int>(counters_.recent_failures.size()) > std::max(r.crash_loop.failures, 0))) {
      counters_.recent_failures.pop_front();
    }
    if (counters_.failures > r.max_restarts) {
      why = "giving up: the trainer failed " + std::to_string(counters_.failures) + " times, last with " +
            Describe(status) + " (restart.max_restarts = " + std::to_string(r.max_restarts) + ")";
    } else if (r.crash_loop.failures > 0 &&
               static_cast<int>(counters_.recent_failures.size()) >= r.crash_loop.failures) {
      why = "giving up: crash loop, " + std::to_string(counters_.recent_failures.size()) + " failures within " +
            FormatDuration(r.crash_loop.window) + ", last with " + Describe(status) + " (restart.crash_loop)";
    }
  }
  if (!why.empty()) {
    actions.push_back(AttemptEndedAction{status, outcome, "give up"});
    return Finish(ExitCode::kFailed, why, std::move(actions));
  }
  const auto delay = NextBackoff();
  actions.push_back(AttemptEndedAction{status, outcome, "restart in " + FormatDuration(delay)});
  actions.push_back(Note(LogLevel::kWarning, "event=restart_scheduled outcome=" + std::string(ToString(outcome)) +
                                                 " status=\"" + Describe(status) + "\" delay=" + FormatDuration(delay) +
                                                 " failures=" + std::to_string(counters_.failures) +
                                                 " hangs=" + std::to_string(counters_.hangs)));
  phase_ = Phase::kBackoff;
  actions.push_back(ArmTimerAction{TimerKind::kBackoff, now + delay});
  return actions;
}

std::chrono::milliseconds Fsm::NextBackoff() {
  const auto& b = job_.restart.backoff;
  const int n = std::max(0, counters_.consecutive_failures - 1);
  double ms = static_cast<double>(b.initial.count()) * std::pow(b.multiplier, std::min(n, 64));
  ms = std::min(ms, static_cast<double>(b.max.count()));
  if (b.jitter > 0) {
    std::uniform_real_distribution<double> spread(-b.jitter, b.jitter);
    ms *= 1.0 + spread(rng_);
  }
  return milliseconds(static_cast<std::int64_t>(std::max(0.0, ms)));
}

std::vector<Action> Fsm::Finish(ExitCode code, std::string message, std::vector<Action> actions) {
  phase_ = Phase::kFinished;
  actions.push_back(ExitAction{code, std::move(message)});
  return actions;
}

// ---- stops ----
// A stop request in every phase, the timers (grace, kill, backoff, selection, drained, join,
// a lingering launcher), a checkpoint request, a cleared notice, and a launcher whose
// workers are gone.

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

// ---- deferred stops (Phase::kDeferred) ----
// A notice for a trainer that cannot save on the stop signal, and a growth of the group,
// wait for its next good checkpoint; a checkpoint being written, the time running out, a
// stop of another kind and the trainer's handlers (looked at again while it waits) end the
// wait.

// A trainer none of whose processes catches signals.on_notice dies on it at once and loses
// every step since its last save, so an early stop gains nothing: it runs on until its next
// periodic save lands or the notice's grace is spent, whichever comes first. Only with a
// deadline (a stop from systemd or SLURM has none: the sender waits for no one), only with
// the grace not already at provider.min_grace, and only alone: a group's stop is the
// group's, its other nodes stop at once and a trainer left running would block on them.
std::vector<Action> Fsm::MaybeDefer(const StopRequestedEvent& e, std::chrono::milliseconds cap, bool near,
                                    TimePoint now) {
  if (!job_.signals.defer_stop || !e.nobody_catches || !e.notice || !e.notice->left || near || world_ > 1 ||
      cap.count() <= 0) {
    return {};
  }
  phase_ = Phase::kDeferred;
  stop_reason_ = StopReason::kNotice;
  stop_detail_ = e.detail;
  deferred_detail_ = e.detail;
  deferred_until_ = now + cap;
  deferred_deadline_ = now + *e.notice->left;
  deferred_seen_at_ = e.notice->seen_at;
  deferred_wall_deadline_ = e.notice->seen_at + *e.notice->left;
  deferred_writing_.clear();
  deferred_extended_ = false;
  deferred_for_growth_ = false;
  deferred_asked_ = false;
  frozen_ = false;
  notice_cleared_early_ = false;
  const std::string signal = config::SignalName(job_.signals.on_notice);
  return {Note(LogLevel::kWarning,
               "event=stop_deferred reason=\"no process catches " + signal +
                   "\" until=" + preemption::FormatIso8601(e.notice->seen_at + cap) + " in=" + FormatDuration(cap) +
                   " notice=\"" + e.detail +
                   "\" detail=\"the trainer runs on until its next good checkpoint lands (asked for "
                   "where it catches " +
                   config::SignalName(job_.signals.checkpoint) + "), then stops (signals.defer_stop)\""),
          ArmTimerAction{TimerKind::kDefer, deferred_until_},
          SampleHandlersAction{}};  // a trainer that saves on request is asked at once
}

// The notice's stop, now: what is left of its grace (at least provider.min_grace). A
// growth's: the group's stop, told to the other nodes unless one of them stopped first
// (`by_peer`), so that every node stops at the checkpoint that ended it.
std::vector<Action> Fsm::EndDeferral(const std::string& why, TimePoint now, bool by_peer) {
  std::vector<Action> actions{CancelTimerAction{TimerKind::kDefer}, CancelTimerAction{TimerKind::kHandlers},
                              Note(LogLevel::kWarning, "event=deferred_stop_ends why=\"" + why + "\"")};
  phase_ = Phase::kRunning;
  std::vector<Action> more;
  if (deferred_for_growth_) {
    if (!by_peer) actions.push_back(PublishStopAction{"grow: " + deferred_detail_ + " (" + why + ")", std::nullopt});
    more = StopTheTrainer(StopRequestedEvent{StopReason::kPeer, std::nullopt, deferred_detail_}, now);
  } else {
    const auto left = std::chrono::duration_cast<milliseconds>(deferred_until_ - now);
    const auto grace = std::max(left, std::chrono::duration_cast<milliseconds>(job_.provider.min_grace));
    more = StopTheTrainer(StopRequestedEvent{StopReason::kNotice, grace, deferred_detail_}, now);
  }
  actions.insert(actions.end(), more.begin(), more.end());
  Thaw(actions);  // after the stop's signal: the trainer meets it first
  return actions;
}

// A trainer that saves on the stop signal stops at once: it keeps every step. One that dies
// on it runs on to its next good checkpoint (asked for now where it catches
// signals.checkpoint), for coordination.grow_wait at most, and the group stops there: the
// newcomer idles meanwhile, but no node of the group loses the steps since its last save.
std::vector<Action> Fsm::OnGroupGrowing(const GroupGrowingEvent& e, TimePoint now) {
  if (phase_ != Phase::kRunning) return {};  // not running, or already on its way to a stop
  if (e.stop_caught) return StopTheTrainer(StopRequestedEvent{StopReason::kPeer, std::nullopt, e.detail}, now);
  phase_ = Phase::kDeferred;
  stop_reason_ = StopReason::kPeer;
  stop_detail_ = e.detail;
  deferred_detail_ = e.detail;
  deferred_for_growth_ = true;
  deferred_asked_ = e.checkpoint_caught;
  frozen_ = false;
  deferred_until_ = now + job_.coordination.grow_wait;
  deferred_deadline_ = deferred_until_;
  deferred_seen_at_ = e.seen_at;
  deferred_wall_deadline_ = e.seen_at + job_.coordination.grow_wait;
  deferred_writing_.clear();
  deferred_extended_ = false;
  const std::string signal = config::SignalName(job_.signals.checkpoint);
  std::vector<Action> actions{
      Note(LogLevel::kWarning, "event=stop_deferred reason=\"no process catches " +
                                   config::SignalName(job_.signals.on_notice) +
                                   "\" until=" + preemption::FormatIso8601(deferred_wall_deadline_) +
                                   " in=" + FormatDuration(job_.coordination.grow_wait) + " grow=\"" + e.detail +
                                   "\" detail=\"the group grows at the trainer's next good checkpoint" +
                                   (e.checkpoint_caught ? " (asked for now with " + signal + ")" : std::string()) +
                                   ", then stops (coordination.grow_wait)\""),
      ArmTimerAction{TimerKind::kDefer, deferred_until_}};
  if (e.checkpoint_caught) {
    actions.push_back(Note(LogLevel::kInfo, "event=checkpoint_requested detail=\"the group grows\" signal=" + signal));
    actions.push_back(SignalAction{job_.signals.checkpoint, job_.signals.Recipients(), /*only_to_handlers=*/true});
  } else {
    actions.push_back(ArmTimerAction{TimerKind::kHandlers, now + kHandlersRecheck});  // nothing to ask yet
  }
  return actions;
}

// A trainer that came to catch the stop signal since the deferral began saves on it: the
// stop now keeps every step (the notice's with what is left of its grace; the growth's,
// told to the group). One that catches only the checkpoint request is asked, once: its save
// ends the wait. Otherwise it is looked at again after kHandlersRecheck, until the wait ends.
std::vector<Action> Fsm::OnHandlersSampled(const HandlersSampledEvent& e, TimePoint now) {
  if (phase_ != Phase::kDeferred) return {};
  if (e.stop_caught) {
    return EndDeferral(
        "the trainer catches " + config::SignalName(job_.signals.on_notice) + " now: it saves on the stop", now);
  }
  std::vector<Action> actions;
  if (!deferred_asked_ && e.checkpoint_caught) {
    deferred_asked_ = true;
    const std::string signal = config::SignalName(job_.signals.checkpoint);
    actions.push_back(Note(LogLevel::kInfo, "event=checkpoint_requested detail=\"" +
                                                (deferred_for_growth_ ? "the group grows" : deferred_detail_) +
                                                " (the trainer catches " + signal + ")\" signal=" + signal));
    actions.push_back(SignalAction{job_.signals.checkpoint, job_.signals.Recipients(), /*only_to_handlers=*/true});
  }
  actions.push_back(ArmTimerAction{TimerKind::kHandlers, now + kHandlersRecheck});
  return actions;
}

// A write seen while the stop waits: if the time runs out before it lands, it is waited for.
std::vector<Action> Fsm::OnCheckpointWriting(const CheckpointWritingEvent& e) {
  if (phase_ != Phase::kDeferred) return {};
  deferred_writing_ = e.path;
  std::vector<Action> actions;
  Thaw(actions);  // not complete yet: the trainer finishes writing it
  return actions;
}

// A checkpoint written since the deferral began is about to be judged: the trainer waits,
// paused, for the verdict. A good one ends the deferral (the stop, then SIGCONT); anything
// else thaws it (CheckpointWritingEvent, or a landed one that does not count).
std::vector<Action> Fsm::OnCheckpointArriving(const CheckpointArrivingEvent& e) {
  if (phase_ != Phase::kDeferred || frozen_ || (e.written_at && *e.written_at < deferred_seen_at_)) return {};
  frozen_ = true;
  return {Note(LogLevel::kInfo, "event=trainer_frozen checkpoint=" + e.path.string() +
                                    " detail=\"SIGSTOP while the checkpoint is judged: a step trained meanwhile "
                                    "would be lost with the stop\""),
          FreezeTrainerAction{}};
}

void Fsm::Thaw(std::vector<Action>& actions) {
  if (!frozen_) return;
  frozen_ = false;
  actions.push_back(ThawTrainerAction{});
}

// The deadline less provider.safety_margin has come. A checkpoint being written then gets
// what is left up to kDeferredWriteMargin before the deadline (once): a stop now would tear
// it, while a trainer that dies at once on the signal needs no grace, and a write the VM's
// end cuts short costs no more than one the stop cuts short (the previous version stays).
std::vector<Action> Fsm::OnDeferTimer(TimePoint now) {
  if (deferred_for_growth_) return EndDeferral("coordination.grow_wait has passed without a new good checkpoint", now);
  const TimePoint last = deferred_deadline_ - kDeferredWriteMargin;
  if (deferred_writing_.empty() || deferred_extended_ || last <= now) {
    return EndDeferral(deferred_extended_ ? "the checkpoint being written did not land before the deadline less " +
                                                FormatDuration(kDeferredWriteMargin)
                                          : std::string("the deadline less provider.safety_margin has come"),
                       now);
  }
  deferred_extended_ = true;
  deferred_until_ = last;
  const auto wall = deferred_wall_deadline_ - kDeferredWriteMargin;  // for the log
  return {Note(LogLevel::kWarning, "event=deferred_stop_extended why=\"a checkpoint is being written: " +
                                       deferred_writing_.string() + "\" until=" + preemption::FormatIso8601(wall) +
                                       " in=" + FormatDuration(std::chrono::duration_cast<milliseconds>(last - now)) +
                                       " detail=\"a stop now would tear it; it is waited for until the deadline "
                                       "less " +
                                       FormatDuration(kDeferredWriteMargin) + "\""),
          ArmTimerAction{TimerKind::kDefer, last}};
}

// Only a checkpoint written after the notice ends the deferral: one written before it (the
// watcher may see it only now) holds nothing the stop at the notice would not have kept.
std::vector<Action> Fsm::OnCheckpointLanded(const CheckpointLandedEvent& e, TimePoint now) {
  if (phase_ != Phase::kDeferred) return {};
  if (e.written_at && *e.written_at < deferred_seen_at_) {
    std::vector<Action> actions{Note(LogLevel::kDebug, "event=deferred_stop_waits detail=\"" + e.path.string() +
                                                           " was written before the stop was deferred: the trainer "
                                                           "runs on to its next save\"")};
    Thaw(actions);
    return actions;
  }
  return EndDeferral("a new good checkpoint landed: " + e.path.string() + " (step " + std::to_string(e.step) + ")",
                     now);
}

// While deferred the notice still stands: another notice changes nothing; a stop request
// or the budget ends the deferral with its own stop; a hang ends it with the notice's.
std::vector<Action> Fsm::StopWhileDeferred(const StopRequestedEvent& e, TimePoint now) {
  if (e.reason == StopReason::kPeer) {
    return EndDeferral(std::string("the trainer was to stop anyway (") + ReasonName(e.reason) + ": " + e.detail + ")",
                       now, /*by_peer=*/true);
  }
  // A growth's wait ends with any stop of the node's own, which is that stop.
  if (e.reason == StopReason::kNotice && !deferred_for_growth_) return {};
  if (e.reason == StopReason::kHang && !deferred_for_growth_) {
    return EndDeferral(std::string("the trainer was to stop anyway (") + ReasonName(e.reason) + ": " + e.detail + ")",
                       now);
  }
  phase_ = Phase::kRunning;
  auto actions = StopTheTrainer(e, now);
  actions.insert(actions.begin(), {CancelTimerAction{TimerKind::kDefer}, CancelTimerAction{TimerKind::kHandlers}});
  Thaw(actions);
  return actions;
}

}  // namespace spotvisor::supervisor

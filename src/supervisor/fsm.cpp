// The supervisor policy; see fsm.hpp. Invariant: at most one child exists outside kIdle,
// kBackoff, kDrained and kFinished, and an Exit action is always the last action issued.
#include "spotvisor/supervisor/fsm.hpp"

#include <algorithm>
#include <cmath>

#include "fsm_detail.hpp"
#include "spotvisor/config/signals.hpp"

namespace spotvisor::supervisor {

using fsm_detail::Note;
using std::chrono::milliseconds;

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
  if (phase_ != Phase::kRunning) return {};
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

}  // namespace spotvisor::supervisor

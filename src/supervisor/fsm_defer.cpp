// The supervisor policy's deferred stops (see fsm.hpp, Phase::kDeferred): a notice for a
// trainer that cannot save on the stop signal, and a growth of the group, wait for its next
// good checkpoint; a checkpoint being written, the time running out, a stop of another kind
// and the trainer's handlers (looked at again while it waits) end the wait. The rest of the
// stops is in fsm_stop.cpp, the rest of the Fsm in fsm.cpp.
#include <algorithm>

#include "fsm_detail.hpp"
#include "spotvisor/config/signals.hpp"
#include "spotvisor/preemption/time_format.hpp"
#include "spotvisor/supervisor/fsm.hpp"

namespace spotvisor::supervisor {

using fsm_detail::Note;
using fsm_detail::ReasonName;
using std::chrono::milliseconds;

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

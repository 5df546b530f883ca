// The driver's side of preemption notices and of checkpoint selection (see
// driver_impl.hpp): a notice becomes a stop (grace capped by its deadline) or a checkpoint
// request, and is written to the notice file; a cleared notice resumes after
// provider.resume_after; the selection runs on the selection worker and comes back as an event, and the
// start it allows is agreed through the coordinator.
#include <boost/asio/post.hpp>
#include <nlohmann/json.hpp>

#include "child_environment.hpp"
#include "driver_impl.hpp"
#include "spotvisor/log/log.hpp"
#include "spotvisor/preemption/time_format.hpp"

namespace spotvisor::supervisor {
namespace {

namespace asio = boost::asio;
using log::Log;
using log::LogLevel;
using log::Quote;

const char* ActionName(preemption::NoticeAction action) {
  return action == preemption::NoticeAction::kStop ? "stop" : "checkpoint";
}

}  // namespace

void Driver::Impl::Perform(const SelectResumeAction&) {
  selections_.Post(
      [selector = selector_, observers = observers_] {
        for (const auto& o : observers) o->BeforeSelection();
        return selector->SelectForResume();
      },
      [this](Result<checkpoint::Selection> selection) { OnSelected(std::move(selection)); });
}

void Driver::Impl::OnSelected(Result<checkpoint::Selection> selection) {
  if (!selection) {
    Dispatch(SelectionFailedEvent{selection.error().message});
    return;
  }
  for (auto& o : observers_) o->OnSelection(*selection);  // (the catalog logged each rejection)
  Dispatch(ResumeSelectedEvent{checkpoint::GoodSteps(*selection)});
}

void Driver::Impl::Perform(const ProposeResumeAction& a) {
  // The answer may come before Propose returns: it enters the Fsm on a later turn.
  coordinator_->Propose(a, [this](GroupAgreedEvent agreed) {
    asio::post(io_, [this, agreed = std::move(agreed)] { Dispatch(agreed); });
  });
}

void Driver::Impl::Perform(const PublishStopAction& a) { coordinator_->PublishStop(a); }

void Driver::Impl::Perform(const PublishDoneAction&) {
  coordinator_->PublishDone([this] { asio::post(io_, [this] { Dispatch(GroupFinishedEvent{}); }); });
}

void Driver::Impl::OnNotice(const preemption::Notice& n) {
  const auto now = host_->clock().WallNow();
  std::optional<std::chrono::milliseconds> until_deadline;
  if (n.deadline) until_deadline = std::chrono::duration_cast<std::chrono::milliseconds>(*n.deadline - now);
  Log(LogLevel::kWarning, "event=notice provider=" + n.provider + " kind=" + n.kind +
                              " action=" + ActionName(n.action) + " id=" + Quote(n.id) +
                              " deadline=" + (n.deadline ? preemption::FormatIso8601(*n.deadline) : "none") +
                              " warning_ms=" + (until_deadline ? std::to_string(until_deadline->count()) : "unknown") +
                              " detail=" + Quote(n.detail));
  for (auto& o : observers_) o->OnNotice(n);
  if (n.action == preemption::NoticeAction::kCheckpoint) {
    Dispatch(CheckpointRequest(n.provider + " " + n.kind));
    return;
  }
  notice_ = n;
  WriteNoticeFile(n);
  StopRequestedEvent stop{StopReason::kNotice, std::nullopt, n.provider + " " + n.kind,
                          NoticeDeadline{until_deadline, now}};
  // Whether the stop would save anything: the Fsm decides whether to defer it.
  stop.nobody_catches = trainer_ && trainer_->Catchers(job_.signals.on_notice, job_.signals.Recipients()) == 0;
  Dispatch(stop);
}

// The Fsm waits provider.resume_after before it resumes; a withdrawn notice is never
// acknowledged.
void Driver::Impl::OnNoticeCleared() {
  notice_.reset();
  Dispatch(NoticeClearedEvent{});
}

void Driver::Impl::Perform(const AcknowledgeNoticeAction&) {
  if (watcher_ && notice_) watcher_->Acknowledge(*notice_);
}

void Driver::Impl::Perform(const ReleaseRankAction&) { coordinator_->ReleaseRank(); }

// Drained: find (and fully validate) the checkpoint a resume would use, and record it;
// the Fsm then has the provider told (DrainedValidatedEvent).
void Driver::Impl::Perform(const ValidateDrainedAction&) {
  selections_.Post(
      [selector = selector_] { return selector->SelectForResume(); },
      [this](const Result<checkpoint::Selection>& selection) {
        if (finished_) return;
        if (!selection) {
          Log(LogLevel::kError, "event=drained_validation_failed error=" + Quote(selection.error().message));
        } else {
          for (auto& o : observers_) o->OnSelection(*selection);  // (the catalog logged each rejection)
          Log(LogLevel::kWarning,
              "event=drained newest_good=" + Quote(selection->chosen ? selection->chosen->path.string() : "none") +
                  " step=" + (selection->chosen ? std::to_string(selection->chosen->step) : "none"));
        }
        Dispatch(DrainedValidatedEvent{});
      });
}

void Driver::Impl::WriteNoticeFile(const preemption::Notice& n) {
  nlohmann::json j{{"provider", n.provider},
                   {"kind", n.kind},
                   {"action", ActionName(n.action)},
                   {"id", n.id},
                   {"detail", n.detail},
                   {"received_at", preemption::FormatIso8601(host_->clock().WallNow())}};
  j["deadline"] = n.deadline ? nlohmann::json(preemption::FormatIso8601(*n.deadline)) : nlohmann::json(nullptr);
  if (Status s = files_->WriteNotice(j.dump(2) + "\n"); !s) {
    Log(LogLevel::kError, "event=notice_file_failed error=" + Quote(s.error().message));
  }
}

}  // namespace spotvisor::supervisor

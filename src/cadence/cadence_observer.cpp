// Periodic checkpoint requests; see cadence_observer.hpp. Time: the run clock's steady time
// for timers, its wall time only to compare with checkpoint mtimes. Journal appends go to
// `writer_` (nothing comes back to the loop from there).
#include "spotvisor/cadence/cadence_observer.hpp"

#include <algorithm>
#include <boost/asio/io_context.hpp>
#include <boost/asio/post.hpp>

#include "spotvisor/log/log.hpp"
#include "spotvisor/state/journal.hpp"

namespace spotvisor::cadence {
namespace {

namespace asio = boost::asio;
using log::Log;
using log::LogLevel;
using log::Quote;
using std::chrono::duration_cast;
using std::chrono::milliseconds;

constexpr auto kMtimeSlack = std::chrono::milliseconds(50);
constexpr auto kMinUnansweredWait = std::chrono::seconds(2);

bool IsInterruption(const std::string& outcome) {
  return outcome == "preempted" || outcome == "failed" || outcome == "hang";
}

std::string Round1(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f", v);
  return buf;
}

}  // namespace

CadenceObserver::CadenceObserver(const config::JobConfig& job, checkpoint_watch::CheckpointWatcher* watcher,
                                 const std::string& provider)
    : job_(job), watcher_(watcher), policy_(job.cadence, MtbiPriorFor(job.cadence, provider)) {
  if (!watcher_) return;
  // The newest good checkpoint of each scan: older ones that turned up with it are no answer.
  watcher_->Subscribe([this](const std::vector<checkpoint_watch::CheckpointVerdict>& verdicts) {
    const auto newest = std::find_if(verdicts.rbegin(), verdicts.rend(), [](const auto& v) { return v.good; });
    if (newest != verdicts.rend()) OnCheckpoint(*newest);
  });
}

CadenceObserver::~CadenceObserver() { writer_.join(); }

void CadenceObserver::OnStart(supervisor::RunControl& control) {
  control_ = &control;
  clock_ = &control.clock();
  timer_ = clock_->MakeTimer(control.io());
  // What earlier supervisors of this job saw: run time, interruptions, measured costs.
  if (auto journal = state::Journal::Open(job_.telemetry.state_dir)) {
    for (const auto& a : journal->ReadAttempts()) {
      if (a.ended_ms > a.started_ms)
        policy_.ObserveRun(milliseconds(a.ended_ms - a.started_ms), IsInterruption(a.outcome));
    }
  }
  for (const auto& r : ReadCheckpointRecords(job_.telemetry.state_dir)) {
    if (r.event == "checkpoint" && r.cost_ms) policy_.ObserveCost(milliseconds(*r.cost_ms));
  }
  const bool adaptive = job_.cadence.mode == config::CadenceMode::kAdaptive;
  interval_ = policy_.Interval();
  Log(LogLevel::kInfo, std::string("event=cadence mode=") +
                           (adaptive ? "adaptive " + policy_.Describe() +
                                           " interruptions_seen=" + std::to_string(policy_.interruptions()) + " min=" +
                                           FormatDuration(job_.cadence.min) + " max=" + FormatDuration(job_.cadence.max)
                                     : "fixed every=" + FormatDuration(job_.cadence.every)));
}

void CadenceObserver::OnAttemptStarted(const supervisor::SpawnAction& start, pid_t) {
  attempt_ = start.attempt;
  attempt_started_ = clock_->Now();
  pending_.reset();
  if (watcher_) watcher_->Hurry(false);
  // Never before the trainer has run one full interval: it may have no handler yet.
  ArmAt(attempt_started_ + policy_.Interval());
}

void CadenceObserver::OnAttemptEnded(const state::AttemptRecord& record) {
  const bool interrupted = IsInterruption(record.outcome);
  policy_.ObserveRun(milliseconds(std::max<std::int64_t>(0, record.ended_ms - record.started_ms)), interrupted);
  attempt_ = 0;
  if (timer_) timer_->Cancel();
  if (interrupted) NoteIntervalChange("interruption");
}

void CadenceObserver::OnNotice(const preemption::Notice& notice) {
  // The driver itself turns a checkpoint-only notice into a request; we measure it.
  if (notice.action != preemption::NoticeAction::kCheckpoint || phase_ != supervisor::Phase::kRunning) return;
  Request("notice " + notice.provider + " " + notice.kind, /*signal=*/false);
  ArmAt(clock_->Now() + policy_.Interval());
}

void CadenceObserver::OnSignalSent(int signo, config::SignalTarget) {
  if (pending_ && signo == job_.signals.checkpoint) pending_->delivered = true;
}

void CadenceObserver::OnPhase(supervisor::Phase phase) {
  phase_ = phase;
  if (phase != supervisor::Phase::kRunning && timer_) timer_->Cancel();
}

void CadenceObserver::PostDurabilityPlan(Duration upload, bool fits) {
  if (!control_) return;
  asio::post(control_->io(), [this, upload, fits] {
    if (stopped_ || !policy_.ObserveUpload(fits ? std::nullopt : std::optional<Duration>(upload))) return;
    NoteIntervalChange(fits ? "save + upload fits the warning window: C is the save alone"
                            : "save + upload does not fit the warning window: the upload counts in C");
  });
}

void CadenceObserver::OnExit(int, const std::string&) {
  stopped_ = true;
  if (timer_) timer_->Cancel();
}

void CadenceObserver::ArmAt(SteadyTime at) {
  if (stopped_ || !timer_) return;
  timer_->At(at, [this] {
    if (!stopped_) OnTimer();
  });
}

void CadenceObserver::OnTimer() {
  if (phase_ != supervisor::Phase::kRunning || attempt_ == 0) return;
  const auto now = clock_->Now();
  // A request that reached no process (a launcher starting or restarting its workers) was
  // never asked: ask again now, not "unanswered".
  if (pending_ && !pending_->delivered) pending_.reset();
  if (pending_) {
    // One request at a time; it counts as unanswered after an interval, but never before
    // kMinUnansweredWait (the watcher must have had time to find and validate the answer).
    const auto give_up_at = pending_->at + std::max<Duration>(policy_.Interval(), kMinUnansweredWait);
    if (now < give_up_at) {
      ArmAt(give_up_at);
      return;
    }
    const auto waited = duration_cast<milliseconds>(now - pending_->at);
    Log(LogLevel::kWarning,
        "event=checkpoint_request_unanswered reason=" + Quote(pending_->reason) + " waited=" + FormatDuration(waited) +
            " detail=\"no new good checkpoint appeared; does the trainer handle signals.checkpoint?\"");
    CheckpointRecord r;
    r.event = "unanswered";
    r.reason = pending_->reason;
    r.waited_ms = waited.count();
    Journal(std::move(r));
  }
  const bool adaptive = job_.cadence.mode == config::CadenceMode::kAdaptive;
  Request(adaptive ? "adaptive" : "cadence", /*signal=*/true);
  ArmAt(now + policy_.Interval());
}

void CadenceObserver::Request(const std::string& reason, bool signal) {
  pending_ = Pending{reason, clock_->Now(), clock_->WallNow()};
  if (signal) {
    control_->RequestCheckpoint(reason == "adaptive" ? "adaptive cadence " + policy_.Describe()
                                                     : "cadence every " + FormatDuration(policy_.Interval()));
  }
  if (watcher_) watcher_->Hurry(true);
}

void CadenceObserver::OnCheckpoint(const checkpoint_watch::CheckpointVerdict& c) {
  CheckpointRecord r;
  r.event = "checkpoint";
  r.attempt = attempt_;
  r.path = c.path.string();
  r.step = c.step;
  r.size_bytes = c.shape.bytes;
  // The answer to a request is a checkpoint written after it; an older one that only now
  // turned up (or passed validation) is the trainer's own. File times come from the
  // kernel's coarse clock (one tick, up to 10 ms, behind the precise one): allow for it.
  const bool answers = pending_ && c.written_at + kMtimeSlack >= pending_->wall;
  std::string cost_text = "unmeasured";
  if (answers) {
    const auto done = std::min(c.detected_at, std::max(c.written_at, pending_->wall));
    const auto cost = duration_cast<milliseconds>(done - pending_->wall);
    policy_.ObserveCost(cost);
    r.reason = pending_->reason;
    r.cost_ms = cost.count();
    cost_text = FormatDuration(cost);
    pending_.reset();
    if (watcher_) watcher_->Hurry(false);
  } else {
    r.reason = "trainer";
  }
  r.interval_ms = policy_.Interval().count();
  if (auto cost = policy_.Cost()) r.c_ms = cost->count();
  r.m_ms = policy_.Mtbi().count();
  r.overhead_pct = policy_.OverheadPercent(RunTimeSoFar());
  r.expected_waste_pct = policy_.ExpectedWastePercent();
  Log(LogLevel::kInfo, "event=checkpoint_seen path=" + Quote(r.path) + " step=" + std::to_string(c.step) +
                           " size=" + Quote(FormatSize(c.shape.bytes)) + " reason=" + Quote(r.reason) +
                           " cost=" + cost_text + " overhead_pct=" + Round1(*r.overhead_pct));
  Journal(std::move(r));
  NoteIntervalChange("measured cost");
  // Any new checkpoint restarts the period: the trainer's own count too.
  if (phase_ == supervisor::Phase::kRunning && attempt_ != 0) ArmAt(clock_->Now() + policy_.Interval());
}

void CadenceObserver::NoteIntervalChange(const std::string& why) {
  const Duration now_interval = policy_.Interval();
  if (now_interval == interval_ || job_.cadence.mode != config::CadenceMode::kAdaptive) return;
  Log(LogLevel::kInfo, "event=cadence_interval " + policy_.Describe() + " previous=" + FormatDuration(interval_) +
                           " reason=" + Quote(why) + " interruptions_seen=" + std::to_string(policy_.interruptions()));
  interval_ = now_interval;
  CheckpointRecord r;
  r.event = "interval";
  r.reason = why;
  r.attempt = attempt_;
  r.interval_ms = now_interval.count();
  if (auto cost = policy_.Cost()) r.c_ms = cost->count();
  r.m_ms = policy_.Mtbi().count();
  r.overhead_pct = policy_.OverheadPercent(RunTimeSoFar());
  r.expected_waste_pct = policy_.ExpectedWastePercent();
  Journal(std::move(r));
}

Duration CadenceObserver::RunTimeSoFar() const {
  Duration total = policy_.observed();
  if (attempt_ != 0) total += duration_cast<milliseconds>(clock_->Now() - attempt_started_);
  return total;
}

void CadenceObserver::Journal(CheckpointRecord record) {
  record.at_ms = UnixMillis(clock_->WallNow());  // only after OnStart: verdicts and ends come later
  asio::post(writer_, [dir = job_.telemetry.state_dir, record = std::move(record)] {
    if (Status s = AppendCheckpointRecord(dir, record); !s) {
      Log(LogLevel::kError, "event=checkpoint_journal_failed error=" + Quote(s.error().message));
    }
  });
}

}  // namespace spotvisor::cadence

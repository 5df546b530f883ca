// The supervisor's policy as a state machine without I/O: it takes an event and the
// current time and returns the actions to carry out (spawn, signal, arm a timer, exit).
// The driver (driver.hpp) turns real events into these and performs the actions. Tests
// drive it with tables, time being a plain argument. Single-threaded.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <csignal>
#include <cstdint>
#include <deque>
#include <filesystem>
#include <optional>
#include <random>
#include <string>
#include <variant>
#include <vector>

#include "spotvisor/checkpoint/resume_selector.hpp"
#include "spotvisor/config/job_config.hpp"
#include "spotvisor/log/log.hpp"
#include "spotvisor/supervisor/outcome.hpp"

namespace spotvisor::supervisor {

using TimePoint = std::chrono::steady_clock::time_point;

// Every phase that waits for something outside has a deadline, a timer the Fsm arms on
// entry (s6-supervise style); the phases without one say why.
enum class Phase {
  kIdle,       // not started yet; left at once (the driver sends StartEvent): no deadline
  kSelecting,  // choosing the checkpoint to resume from; deadline kSelect (select_timeout)
  kJoining,    // our good steps proposed, waiting for the group to agree on the start (a
               // single node agrees at once: LocalCoordinator); deadline kJoin: exit 75
  kRunning,    // the trainer runs: the work itself, bounded by the hang detector, not a timer
  kDeferred,   // a notice came, but no process of the trainer catches signals.on_notice (it
               // would die and lose every step since its last save): it runs on until its next
               // good checkpoint lands (then the stop) or until kDefer (the deadline less
               // provider.safety_margin); signals.defer_stop. The same for a group that grows
               // (GroupGrowingEvent): kDefer is then coordination.grow_wait
  kStopping,   // we asked the trainer to stop; kGrace, then kKill after the SIGKILL
  kBackoff,    // waiting before the next start; kBackoff
  kDrained,    // stopped for a preemption notice; waiting for the machine to go, or to
               // resume; kDrained (provider.drained_timeout): the machine stayed, resume;
               // the notice cleared: kResume (provider.resume_after), then resume
  kFinishing,  // multi-node: this node's trainer succeeded, waiting until every node's has
               // (a peer's stop instead: rejoin); deadline kJoin (join_timeout): exit 75
  kSpare,      // multi-node: every rank is held, this node waits to take a lost one
               // (coordination.spares): no deadline; then it selects again and joins
  kFinished,   // an Exit action was issued; terminal
};

// Why we asked the trainer to stop (kNone: it stopped on its own).
// kPeer: another node of the group stopped (its notice, signal, hang, crash, or its lease
// lapsed); this node stops too, never counts it, and waits for the group to start again.
enum class StopReason { kNone, kSignal, kNotice, kHang, kBudget, kPeer };

enum class TimerKind {
  kGrace,     // the stop's grace window ends: SIGKILL
  kKill,      // the group outlived SIGKILL for signals.kill_timeout: give up (exit 1)
  kBackoff,   // the restart delay is over: select
  kSelect,    // the selection took checkpoints.select_timeout: give up (a stuck filesystem)
  kDrained,   // drained for provider.drained_timeout and the machine is still here: resume
  kJoin,      // the group did not agree on a start (or finish) within coordination.join_timeout: exit 75
  kLauncher,  // a launcher outlived its workers by signals.kill_timeout after SIGTERM: SIGKILL
  kResume,    // drained, the notice cleared, the machine still here after provider.resume_after: resume
  kDefer,     // a deferred stop's time is up (the notice's deadline less provider.safety_margin, or
              // coordination.grow_wait for a growth): stop
  kHandlers,  // a deferred stop looks again at the trainer's handlers (kHandlersRecheck): one that
              // started moments ago may catch the stop, or the checkpoint request, by now
};
inline constexpr TimerKind kTimerKinds[] = {
    TimerKind::kGrace, TimerKind::kKill,     TimerKind::kBackoff, TimerKind::kSelect, TimerKind::kDrained,
    TimerKind::kJoin,  TimerKind::kLauncher, TimerKind::kResume,  TimerKind::kDefer,  TimerKind::kHandlers};

// Where this node stands in the group for one start.
struct GroupPlace {
  int rank = 0;                           // this node's rank, 0..world-1
  int world = 1;                          // nodes in the group (torchrun's --nnodes)
  std::uint64_t epoch = 0;                // the group's restart generation, new for every start
  std::string master_addr = "127.0.0.1";  // node 0's advertised address
  int master_port = 29500;                // coordination.master_port
};

// How the whole process group ended: exit code, or the signal that killed the main child.
struct ExitStatus {
  int code = 0;    // valid when signal == 0
  int signal = 0;  // the terminating signal, 0 when it exited
};

// ---- events ----
struct StartEvent {};
struct ResumeSelectedEvent {
  std::vector<checkpoint::ResumePoint> good;  // every good checkpoint, newest first; empty: none
};
struct SpawnFailedEvent {
  std::string message;
};
struct ChildExitedEvent {  // the main child and every process of its group are gone
  ExitStatus status;
};
// A preemption notice's stop: how far its deadline was when the notice was seen (none: the
// notice gave no deadline). The Fsm caps the grace from it (notice_grace.hpp).
struct NoticeDeadline {
  std::optional<std::chrono::milliseconds> left;
  std::chrono::system_clock::time_point seen_at{};  // the wall clock when it was seen (for the log)
};
struct StopRequestedEvent {
  StopReason reason = StopReason::kSignal;
  std::optional<std::chrono::milliseconds> grace_cap;  // at most this much grace (a peer's notice's time left)
  std::string detail;                                  // for the log: which signal, which notice
  std::optional<NoticeDeadline> notice;                // a notice of this node's: grace_cap comes from it
  // The driver found no process of signals.target that catches signals.on_notice: the stop
  // would kill the trainer without a save (signals.defer_stop).
  bool nobody_catches = false;
};
// "Checkpoint now" (cadence, a rebalance recommendation, the drill, SIGUSR1 to spotvisor).
// `nobody_catches`: the driver found no process of signals.target that catches
// signals.checkpoint (its default action would end the trainer), so nothing may be sent.
struct CheckpointRequestedEvent {
  std::string detail;
  bool nobody_catches = false;
};
struct NoticeClearedEvent {};  // the provider withdrew the notice (resume after provider.resume_after)
// The checkpoint watcher judged a new (or rewritten) checkpoint good while the trainer ran.
// `written_at`: its newest mtime (none: unknown).
struct CheckpointLandedEvent {
  std::filesystem::path path;
  std::uint64_t step = 0;
  std::optional<std::chrono::system_clock::time_point> written_at;
};
// The checkpoint watcher found a new (or changed) checkpoint while the trainer ran, and is
// about to judge it: a deferred stop pauses the trainer until the verdict (FreezeTrainerAction),
// so that the steps it would train while the checkpoint is judged are not thrown away with it.
// `written_at`: its newest mtime (none: unknown).
struct CheckpointArrivingEvent {
  std::filesystem::path path;
  std::optional<std::chrono::system_clock::time_point> written_at;
};
// The checkpoint watcher saw a checkpoint being written (new or changed, not good yet) while
// the trainer ran: a deferred stop whose time comes during the write waits for it where the
// deadline leaves room.
struct CheckpointWritingEvent {
  std::filesystem::path path;
};
// A deferred stop whose time comes while a checkpoint is being written waits for the write
// until this long before the notice's deadline.
inline constexpr std::chrono::milliseconds kDeferredWriteMargin{1000};
struct TimerFiredEvent {
  TimerKind kind;
};
struct WorkersGoneEvent {};  // after WatchWorkersAction: the launcher has no live worker left
// After WatchWorkersAction, at every poll while the launcher has live workers: the CPU they
// have used so far and whether every one of them sits in a socket wait. The Fsm judges them
// stalled when they use no CPU at all for kWorkersStallWindow, each in a socket wait (in
// torch 2.x, on the rendezvous store that the held launcher serves): a rank that computes or
// saves shows ticks well within it.
inline constexpr std::chrono::seconds kWorkersStallWindow{5};
struct WorkersSampledEvent {
  std::uint64_t cpu_ticks = 0;
  bool all_in_socket_waits = false;
};
// After ProposeResumeAction: the coordinator's answer, where the group starts from and this
// node's place in it.
struct GroupAgreedEvent {
  std::optional<checkpoint::ResumePoint> point;  // none: a fresh start
  GroupPlace place;
  int group_failures = 0;  // failures the whole group has counted (multi-node: etcd's; 0 alone)
};
// Every node's trainer of the running epoch succeeded (the coordinator's answer to
// PublishDoneAction; to a spare, the coordinator's news that the group it waited for is done).
struct GroupFinishedEvent {};
// After ProposeResumeAction, multi-node with coordination.spares: every rank is held and this
// node waits as a spare (`waiting`), or it has taken a lost rank (not `waiting`; the
// proposal was dropped: the checkpoints may have changed meanwhile, so select again).
struct GroupSpareEvent {
  bool waiting = true;
};
// Multi-node: no etcd member renewed this node's lease for coordination.lease_ttl while its
// trainer ran, so its rank can be taken by another node. The driver sampled the trainer's
// process group for `sampled_for`: `trainer_cpu` is the CPU time it used meanwhile (none:
// no trainer was left to sample). The Fsm decides whether the trainer still progresses.
// `attempt` is the attempt that ran when the cut-off was told (Counters::attempts): a
// judgement of a trainer that has ended since says nothing of the next one, which started
// only once the group agreed with this node again.
inline constexpr double kCutOffBusyShare = 0.05;  // of one CPU: a trainer below it shows no progress
struct GroupCutOffEvent {
  int attempt = 0;
  std::optional<std::chrono::milliseconds> trainer_cpu;
  std::chrono::milliseconds sampled_for{0};
};
// Multi-node: a node joined the running, shrunken group, which grows back at a checkpoint.
// The driver read, at that moment, whether any process of signals.target catches
// signals.on_notice (the stop: it saves on it) and signals.checkpoint (it saves on request).
// A trainer that saves on the stop stops at once; one that cannot runs on to its next good
// checkpoint (asked for when it catches signals.checkpoint), at most coordination.grow_wait.
struct GroupGrowingEvent {
  std::string detail;  // which node joined
  bool stop_caught = true;
  bool checkpoint_caught = false;
  std::chrono::system_clock::time_point seen_at{};  // the wall clock when it was seen
};
// After SampleHandlersAction: whether a process of signals.target catches signals.on_notice
// (the stop: it saves on it) and signals.checkpoint (it saves on request), read now. A stop
// deferred because the trainer caught neither when it came looks again every
// kHandlersRecheck: a trainer installs its handlers some time after it starts (imports, the
// model's construction), and a notice or a growth can come before that.
inline constexpr std::chrono::seconds kHandlersRecheck{1};
struct HandlersSampledEvent {
  bool stop_caught = false;
  bool checkpoint_caught = false;
};
// After SelectResumeAction: the selection could not look at the checkpoints (not stuck: failed).
struct SelectionFailedEvent {
  std::string message;
};
// The trainer's process group outlived SIGKILL for signals.kill_timeout after its main process
// exited (a process stuck in the kernel).
struct GroupSurvivedKillEvent {
  pid_t pgid = 0;
};
// After ValidateDrainedAction: the checkpoint a resume would use was found and validated (or
// the attempt failed and was logged); either way the notice can be acknowledged.
struct DrainedValidatedEvent {};
using Event =
    std::variant<StartEvent, ResumeSelectedEvent, SpawnFailedEvent, ChildExitedEvent, StopRequestedEvent,
                 CheckpointRequestedEvent, NoticeClearedEvent, TimerFiredEvent, WorkersGoneEvent, WorkersSampledEvent,
                 GroupAgreedEvent, GroupFinishedEvent, SelectionFailedEvent, GroupSurvivedKillEvent,
                 DrainedValidatedEvent, GroupSpareEvent, GroupCutOffEvent, CheckpointLandedEvent,
                 CheckpointWritingEvent, GroupGrowingEvent, HandlersSampledEvent, CheckpointArrivingEvent>;

// ---- actions ----
struct SelectResumeAction {};
// Ask the coordinator (coordinator.hpp) where to start from: our good steps, newest first.
// Its answer comes back as GroupAgreedEvent.
struct ProposeResumeAction {
  std::vector<checkpoint::ResumePoint> good;
  int attempt = 0;  // the attempt this start will be (a single node's epoch)
};
struct SpawnAction {
  std::optional<checkpoint::ResumePoint> resume;
  int attempt = 0;        // 1-based, continues across supervisor restarts
  int restart_count = 0;  // attempt - 1
  GroupPlace place;       // rank, world and epoch the group agreed on
};
struct SignalAction {
  int signo = 0;
  config::SignalTarget to = config::SignalTarget::kGroup;  // kGroup, kMain or kWorkers (never kAuto)
  bool only_to_handlers = false;  // "checkpoint now": never to a worker without a handler (it would die)
};
// Pause (SIGSTOP) the launcher and the launchers under it while its workers stop: a paused
// launcher can neither restart them (torchrun --max_restarts) nor kill them on its own
// timeout (torchrun's 30 s after a SIGTERM).
struct HoldLaunchersAction {};
// The launchers held get `signo` (0: none), then SIGCONT: they wake up to a stop, or run on.
struct ReleaseLaunchersAction {
  int signo = SIGTERM;
};
// Report WorkersGoneEvent once the launcher has no live worker, and until then a
// WorkersSampledEvent at every poll.
struct WatchWorkersAction {};
struct SampleHandlersAction {};  // answered at once by HandlersSampledEvent
// A deferred stop's checkpoint is being judged: SIGSTOP to the trainer's process group, so
// that it trains no step the stop would throw away; SIGCONT (ThawTrainerAction) when the
// checkpoint is not good after all, or after the stop's signal (which it then meets first).
struct FreezeTrainerAction {};
struct ThawTrainerAction {};
struct KillGroupAction {};  // SIGKILL to the whole group
// Tell the group this node's trainer is stopping or has failed, so every node stops (the
// coordinator publishes it once per epoch; a single node has no one to tell).
struct PublishStopAction {
  std::string why;                                     // "notice: aws spot-itn", "trainer failed: exit code 1"
  std::optional<std::chrono::milliseconds> grace_cap;  // a notice's time left, for the peers' grace
  std::optional<int> failures;                         // a failure of this node's: the job's failure count with it
};
// This node's trainer succeeded: tell the group, and answer GroupFinishedEvent once every
// node's has (multi-node only: a single node is done at once).
struct PublishDoneAction {};
struct ArmTimerAction {
  TimerKind kind;
  TimePoint at;
};
struct CancelTimerAction {
  TimerKind kind;
};
// One attempt is over: what it was and what follows.
struct AttemptEndedAction {
  ExitStatus status;
  Outcome outcome = Outcome::kFailed;
  std::string next;        // what we do about it, in words
  std::string stopped_by;  // a peer-stopped attempt: which node and why ("node 0: notice: aws spot-itn")
};
using log::LogLevel;
struct LogAction {
  LogLevel level;
  std::string text;  // "event=... key=value ..."
};
// Drained: find and fully validate the checkpoint a resume would use, so that it is known
// good before the machine goes; answered by DrainedValidatedEvent.
struct ValidateDrainedAction {};
// Tell the provider this node is ready to go (Azure's StartRequests; a no-op elsewhere).
struct AcknowledgeNoticeAction {};
// Drained with spares in the group: give this node's rank up now, so that a spare takes it
// at once instead of when the machine is gone; a later start claims a rank again.
struct ReleaseRankAction {};
struct ExitAction {
  ExitCode code = ExitCode::kDone;
  std::string message;  // one line for people
};
using Action = std::variant<SelectResumeAction, ProposeResumeAction, SpawnAction, SignalAction, HoldLaunchersAction,
                            ReleaseLaunchersAction, WatchWorkersAction, KillGroupAction, PublishStopAction,
                            PublishDoneAction, ArmTimerAction, CancelTimerAction, AttemptEndedAction, LogAction,
                            ExitAction, ValidateDrainedAction, AcknowledgeNoticeAction, ReleaseRankAction,
                            SampleHandlersAction, FreezeTrainerAction, ThawTrainerAction>;

// What survives a supervisor restart (the journal stores it).
struct Counters {
  int attempts = 0;              // children started so far
  int failures = 0;              // failure budget used
  int hangs = 0;                 // hang budget used
  int preemptions = 0;           // never counted against a budget
  int consecutive_failures = 0;  // drives the backoff; reset after a healthy run
  int no_progress_streak = 0;    // restarts after a failure in a row without the resumed step advancing
  std::optional<std::uint64_t> last_resume_step;  // step the previous attempt resumed from
  // The previous attempt failed or hung (not stopped for a notice, a request, a peer or the
  // budget): only such a restart may count toward restart.no_progress_limit. Not in
  // state.json: read back from attempts.jsonl's last outcome.
  bool last_attempt_failed = false;
  std::deque<TimePoint> recent_failures;  // within the crash-loop window
};

class Fsm {
 public:
  // `job` must outlive the Fsm. `seed` feeds the backoff jitter.
  Fsm(const config::JobConfig& job, Counters restored, std::uint64_t seed);

  std::vector<Action> Handle(const Event& event, TimePoint now);

  Phase phase() const { return phase_; }
  const Counters& counters() const { return counters_; }
  // The backoff delay before the next start, given the failures so far (jitter applied).
  std::chrono::milliseconds NextBackoff();

 private:
  std::vector<Action> OnStart(TimePoint now);
  std::vector<Action> OnResumeSelected(const ResumeSelectedEvent& e, TimePoint now);
  std::vector<Action> OnSpawnFailed(const SpawnFailedEvent& e, TimePoint now);
  std::vector<Action> OnChildExited(const ChildExitedEvent& e, TimePoint now);
  std::vector<Action> OnEndedByItself(const ExitStatus& st, TimePoint now, std::vector<Action> actions);
  std::vector<Action> OnStopRequested(const StopRequestedEvent& e, TimePoint now);
  std::vector<Action> StopInBackoff(const StopRequestedEvent& e, TimePoint now);
  std::vector<Action> StopWhileJoining(const StopRequestedEvent& e, TimePoint now);
  std::vector<Action> StopWhileStopping(const StopRequestedEvent& e, TimePoint now);
  std::vector<Action> StopTheTrainer(const StopRequestedEvent& e, TimePoint now);
  // A notice for a trainer that cannot save on it: defer the stop (kDeferred), or not (empty).
  std::vector<Action> MaybeDefer(const StopRequestedEvent& e, std::chrono::milliseconds cap, bool near, TimePoint now);
  std::vector<Action> StopWhileDeferred(const StopRequestedEvent& e, TimePoint now);
  // Ends a deferral: the notice's stop now, with what is left of its grace, or the growth's
  // (told to the group unless `by_peer`: a peer's stop ended it).
  std::vector<Action> EndDeferral(const std::string& why, TimePoint now, bool by_peer = false);
  std::vector<Action> OnCheckpointArriving(const CheckpointArrivingEvent& e);
  std::vector<Action> OnCheckpointLanded(const CheckpointLandedEvent& e, TimePoint now);
  // SIGCONT to a trainer frozen for a deferred stop's checkpoint, appended to `actions`.
  void Thaw(std::vector<Action>& actions);
  std::vector<Action> OnCheckpointWriting(const CheckpointWritingEvent& e);
  // kHandlers came while deferred: the trainer may catch the stop (stop now) or the request
  // (ask now) by this time.
  std::vector<Action> OnHandlersSampled(const HandlersSampledEvent& e, TimePoint now);
  // kDefer's time has come: the stop, or more time for a checkpoint being written.
  std::vector<Action> OnDeferTimer(TimePoint now);
  std::vector<Action> OnCheckpointRequested(const CheckpointRequestedEvent& e);
  // The group grows: stop now, or at the trainer's next good checkpoint (kDeferred).
  std::vector<Action> OnGroupGrowing(const GroupGrowingEvent& e, TimePoint now);
  std::vector<Action> OnNoticeCleared(TimePoint now);
  std::vector<Action> OnTimer(const TimerFiredEvent& e, TimePoint now);
  std::vector<Action> OnGraceExpired(TimePoint now);
  std::vector<Action> OnJoinTimeout();
  std::vector<Action> OnLauncherLingers(TimePoint now);
  std::vector<Action> OnDrainedTimeout(TimePoint now);
  std::vector<Action> OnWorkersGone(TimePoint now);
  std::vector<Action> OnWorkersSampled(const WorkersSampledEvent& e, TimePoint now);
  std::vector<Action> OnWorkersStalled(std::chrono::milliseconds for_how_long);
  std::vector<Action> OnGroupAgreed(const GroupAgreedEvent& e, TimePoint now);
  // restart.no_progress_limit after a start resumed from `step`: the streak updated, and why
  // it gives up (empty: it does not).
  std::string CountProgress(std::optional<std::uint64_t> step);
  std::vector<Action> OnGroupFinished();
  std::vector<Action> OnGroupSpare(const GroupSpareEvent& e, TimePoint now);
  std::vector<Action> OnGroupCutOff(const GroupCutOffEvent& e, TimePoint now);
  std::vector<Action> OnNotice(const StopRequestedEvent& e, TimePoint now);
  std::vector<Action> OnSelectionFailed(const SelectionFailedEvent& e);
  std::vector<Action> OnGroupSurvivedKill(const GroupSurvivedKillEvent& e);
  std::vector<Action> OnDrainedValidated();
  std::vector<Action> Resume(TimePoint now);  // drained, the notice cleared: select again

  // A failure or hang: count it, then either give up or back off.
  std::vector<Action> Fail(const ExitStatus& status, Outcome outcome, TimePoint now);
  // Into kSelecting: the selection and its deadline.
  std::vector<Action> Select(TimePoint now, std::vector<Action> actions = {});
  // Into kDrained: its deadline, and `note` said first.
  std::vector<Action> Drain(TimePoint now, LogAction note, std::vector<Action> actions = {});
  std::vector<Action> OnSelectTimeout();
  std::vector<Action> Finish(ExitCode code, std::string message, std::vector<Action> actions = {});
  bool IsSuccess(const ExitStatus& status) const;

  const config::JobConfig& job_;  // not owned
  Phase phase_ = Phase::kIdle;
  Counters counters_;                            // persisted by the driver
  StopReason stop_reason_ = StopReason::kNone;   // why the current child is being stopped
  std::string stop_detail_;                      // what asked for that stop (StopRequestedEvent::detail)
  StopReason pending_stop_ = StopReason::kNone;  // a stop that came while no child ran
  bool notice_cleared_early_ = false;            // the notice went while its stop ran: resume once drained
  TimePoint started_at_{};                       // when the current child started
  int stop_requests_ = 0;                        // SIGINT/SIGTERM count during this stop
  bool skip_told_ = false;                       // a skipped checkpoint request was logged for this attempt
  bool launchers_held_ = false;                  // HoldLaunchersAction issued, not yet released
  bool launcher_released_ = false;               // its workers gone, the launcher got SIGTERM (kLauncher armed)
  bool launcher_runs_for_workers_ = false;       // released early: its stalled workers may need it
  std::optional<std::uint64_t> workers_cpu_;     // WatchWorkersAction: their CPU ticks at the last sample
  TimePoint workers_busy_at_{};                  // when those last changed
  bool workers_stall_told_ = false;              // judged stalled in this stop
  TimePoint grace_at_{};                         // when the grace of the current stop ends
  TimePoint deferred_until_{};                   // kDeferred: when the notice's grace (and kDefer) ends
  std::string deferred_detail_;                  // kDeferred: the notice's words
  TimePoint deferred_deadline_{};                // kDeferred: the notice's deadline itself
  std::chrono::system_clock::time_point deferred_seen_at_{};        // the notice, on the wall clock
  std::chrono::system_clock::time_point deferred_wall_deadline_{};  // its deadline on the wall clock (for the log)
  std::filesystem::path deferred_writing_;  // kDeferred: a checkpoint seen being written (empty: none)
  bool deferred_extended_ = false;          // kDeferred: kDefer re-armed once for that write
  bool deferred_for_growth_ = false;        // kDeferred: for a growth of the group, not a notice
  bool deferred_asked_ = false;             // kDeferred: signals.checkpoint sent for it (a growth's)
  bool frozen_ = false;                     // FreezeTrainerAction sent, ThawTrainerAction not yet
  int world_ = 1;                           // nodes in the group of the current start
  std::mt19937_64 rng_;                     // jitter
};

std::string Describe(const ExitStatus& status);  // "exit code 3" / "killed by SIGKILL"
const char* PhaseName(Phase phase);              // "running", "drained", ...

}  // namespace spotvisor::supervisor

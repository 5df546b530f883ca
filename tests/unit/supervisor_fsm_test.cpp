// The supervisor policy, table-driven: each row is an event at a time and what must come
// out. Time is a plain argument; nothing sleeps.
#include <gtest/gtest.h>

#include <csignal>
#include <iterator>
#include <map>
#include <set>
#include <tuple>

#include "spotvisor/config/loader.hpp"
#include "spotvisor/config/signals.hpp"
#include "spotvisor/preemption/time_format.hpp"
#include "spotvisor/supervisor/coordinator.hpp"
#include "spotvisor/supervisor/fsm.hpp"

namespace spotvisor::supervisor {
namespace {

using std::chrono::milliseconds;
using std::chrono::seconds;

std::string TimerName(TimerKind kind) {
  switch (kind) {
    case TimerKind::kGrace:
      return "grace";
    case TimerKind::kKill:
      return "kill";
    case TimerKind::kBackoff:
      return "backoff";
    case TimerKind::kSelect:
      return "select";
    case TimerKind::kDrained:
      return "drained";
    case TimerKind::kJoin:
      return "join";
    case TimerKind::kLauncher:
      return "launcher";
    case TimerKind::kResume:
      return "resume";
    case TimerKind::kDefer:
      return "defer";
    case TimerKind::kHandlers:
      return "handlers";
  }
  return "?";
}

// Short names for the expectation column.
std::string Kind(const Action& a) {
  return std::visit(
      [](const auto& x) -> std::string {
        using T = std::decay_t<decltype(x)>;
        if constexpr (std::is_same_v<T, SelectResumeAction>) return "select";
        if constexpr (std::is_same_v<T, ProposeResumeAction>) return "propose";
        if constexpr (std::is_same_v<T, SpawnAction>) return "spawn";
        if constexpr (std::is_same_v<T, SignalAction>)
          return "signal:" + config::SignalName(x.signo) + "/" + config::ToString(x.to);
        if constexpr (std::is_same_v<T, HoldLaunchersAction>) return "hold";
        if constexpr (std::is_same_v<T, ReleaseLaunchersAction>)
          return "release:" + (x.signo != 0 ? config::SignalName(x.signo) : std::string("none"));
        if constexpr (std::is_same_v<T, WatchWorkersAction>) return "watch";
        if constexpr (std::is_same_v<T, KillGroupAction>) return "kill";
        if constexpr (std::is_same_v<T, PublishStopAction>) return "publish";
        if constexpr (std::is_same_v<T, PublishDoneAction>) return "publish_done";
        if constexpr (std::is_same_v<T, ArmTimerAction>) return "arm:" + TimerName(x.kind);
        if constexpr (std::is_same_v<T, CancelTimerAction>) return "cancel";
        if constexpr (std::is_same_v<T, AttemptEndedAction>) return "ended:" + std::string(ToString(x.outcome));
        if constexpr (std::is_same_v<T, LogAction>) return "log";
        if constexpr (std::is_same_v<T, ExitAction>) return "exit:" + std::to_string(Code(x.code));
        if constexpr (std::is_same_v<T, ValidateDrainedAction>) return "validate";
        if constexpr (std::is_same_v<T, AcknowledgeNoticeAction>) return "ack";
        if constexpr (std::is_same_v<T, ReleaseRankAction>) return "release_rank";
        if constexpr (std::is_same_v<T, SampleHandlersAction>) return "sample";
        if constexpr (std::is_same_v<T, FreezeTrainerAction>) return "freeze";
        if constexpr (std::is_same_v<T, ThawTrainerAction>) return "thaw";
      },
      a);
}

// The actions that matter to a row (logs and timer cancels are noise here; so is telling
// the group, which a single node's coordinator ignores: the group's tests look at it).
std::vector<std::string> Kinds(const std::vector<Action>& actions) {
  std::vector<std::string> out;
  for (const auto& a : actions) {
    const auto k = Kind(a);
    if (k != "log" && k != "cancel" && k != "publish") out.push_back(k);
  }
  return out;
}

// The driver's part for a single node: a proposal is answered by the LocalCoordinator at
// once, and the answer handled at the same time; the row sees both.
std::vector<Action> HandleAsTheDriver(Fsm& fsm, const Event& event, TimePoint at) {
  auto actions = fsm.Handle(event, at);
  for (const auto& a : actions) {
    if (const auto* proposal = std::get_if<ProposeResumeAction>(&a)) {
      std::vector<Action> more;
      LocalCoordinator().Propose(*proposal, [&](GroupAgreedEvent agreed) { more = fsm.Handle(agreed, at); });
      actions.insert(actions.end(), more.begin(), more.end());
      break;
    }
  }
  return actions;
}

struct Row {
  Event event;
  long at_ms;
  std::vector<std::string> expect;
};

class FsmTest : public ::testing::Test {
 protected:
  FsmTest() {
    job_ = config::DefaultConfig("/tmp");
    job_.job.command = {"/bin/true"};
    job_.signals.grace = seconds(10);
    job_.restart.backoff = {milliseconds(100), seconds(10), 2.0, 0.0, seconds(60)};
    job_.restart.crash_loop = {100, seconds(60)};
  }

  // Runs the rows through a fresh Fsm; returns it for further checks.
  std::unique_ptr<Fsm> Play(const std::vector<Row>& rows, Counters start = {}) {
    auto fsm = std::make_unique<Fsm>(job_, std::move(start), 1);
    for (std::size_t i = 0; i < rows.size(); ++i) {
      last_ = HandleAsTheDriver(*fsm, rows[i].event, t0_ + milliseconds(rows[i].at_ms));
      EXPECT_EQ(Kinds(last_), rows[i].expect) << "row " << i;
    }
    return fsm;
  }

  std::string ExitMessage() const {
    for (const auto& a : last_) {
      if (auto* e = std::get_if<ExitAction>(&a)) return e->message;
    }
    return "";
  }

  static ResumeSelectedEvent At(std::optional<std::uint64_t> step) {
    if (!step) return ResumeSelectedEvent{};
    return ResumeSelectedEvent{{checkpoint::ResumePoint{"/ck/ckpt_step" + std::to_string(*step), *step}}};
  }

  config::JobConfig job_;
  TimePoint t0_ = TimePoint{} + seconds(1000);
  std::vector<Action> last_;
};

const ChildExitedEvent kExit0{ExitStatus{0, 0}};
const ChildExitedEvent kExit1{ExitStatus{1, 0}};
const ChildExitedEvent kKilled{ExitStatus{0, SIGKILL}};
const StopRequestedEvent kSigterm{StopReason::kSignal, std::nullopt, "SIGTERM to spotvisor"};

TEST_F(FsmTest, CleanExitIsDone) {
  Play({{StartEvent{}, 0, {"select", "arm:select"}},
        {At(std::nullopt), 1, {"propose", "arm:join", "spawn"}},
        {kExit0, 500, {"ended:done", "exit:0"}}});
}

// Multi-node (issue 14): another node's stop stops this trainer through the usual path; its
// end, whatever the code (a trainer that exits 0 after a stop too), is never "done" and
// never counted, and the node goes straight back to agreeing on a start with the group.
TEST_F(FsmTest, APeersStopIsNeverDoneNorCountedAndTheNodeRejoins) {
  const StopRequestedEvent peer{StopReason::kPeer, seconds(30), "node 0: notice: aws spot-itn"};
  auto fsm = Play({{StartEvent{}, 0, {"select", "arm:select"}},
                   {At(20), 1, {"propose", "arm:join", "spawn"}},
                   {peer, 100, {"signal:SIGTERM/group", "arm:grace"}},
                   {kExit0, 5000, {"ended:peer-stopped", "select", "arm:select"}},
                   {At(30), 5001, {"propose", "arm:join", "spawn"}},
                   {peer, 6000, {"signal:SIGTERM/group", "arm:grace"}},
                   {kExit1, 7000, {"ended:peer-stopped", "select", "arm:select"}}});
  EXPECT_EQ(fsm->counters().failures, 0);
  EXPECT_EQ(fsm->counters().preemptions, 0);
  EXPECT_EQ(fsm->counters().consecutive_failures, 0);
  EXPECT_EQ(fsm->phase(), Phase::kSelecting);
}

// Fencing: cut off from etcd for lease_ttl, the trainer is judged by the CPU it used while
// sampled. One that computes goes on (etcd alone is away); one that sits blocked stops as
// for a peer's stop, uncounted, and the node rejoins. Outside a run nothing happens, and a
// judgement of an attempt that has ended says nothing of the next one (the node stopped
// its trainer for another reason, and the group agreed with it again, within the sample).
TEST_F(FsmTest, ACutOffNodeStopsATrainerThatShowsNoProgressAndKeepsOneThatComputes) {
  const GroupCutOffEvent busy{1, milliseconds(1900), milliseconds(2000)};
  const GroupCutOffEvent idle{1, milliseconds(40), milliseconds(2000)};  // 2 %: blocked in a collective
  const GroupCutOffEvent gone{2, std::nullopt, milliseconds(2000)};
  auto fsm = Play({{StartEvent{}, 0, {"select", "arm:select"}},
                   {GroupCutOffEvent{0, milliseconds(40), milliseconds(2000)}, 1, {}},  // nothing runs yet
                   {At(20), 2, {"propose", "arm:join", "spawn"}},
                   {busy, 100, {}},
                   {idle, 200, {"signal:SIGTERM/group", "arm:grace"}},
                   {idle, 300, {}},  // stopping already
                   {kExit1, 400, {"ended:peer-stopped", "select", "arm:select"}},
                   {At(20), 500, {"propose", "arm:join", "spawn"}},
                   {idle, 550, {}},  // sampled while attempt 1 ran
                   {gone, 600, {"signal:SIGTERM/group", "arm:grace"}}});
  EXPECT_EQ(fsm->counters().failures, 0);
  bool said = false;
  for (const auto& a : last_) {
    if (const auto* note = std::get_if<LogAction>(&a)) said = said || note->text.find("cut off") != std::string::npos;
  }
  EXPECT_TRUE(said);
  auto kept = Play({{StartEvent{}, 0, {"select", "arm:select"}}, {At(20), 2, {"propose", "arm:join", "spawn"}}});
  const auto actions = kept->Handle(busy, t0_ + milliseconds(100));
  ASSERT_EQ(actions.size(), 1u);
  const auto* note = std::get_if<LogAction>(&actions[0]);
  ASSERT_NE(note, nullptr);
  EXPECT_NE(note->text.find("event=group_cut_off trainer=progressing cpu=\"1900 ms of CPU in 2000 ms\""),
            std::string::npos)
      << note->text;
  EXPECT_EQ(kept->phase(), Phase::kRunning);
}

// Multi-node: "done" is every node's trainer succeeding. This node's success waits for the
// group's; a peer that fails meanwhile brings this node back into the group's next start,
// uncounted; the group's answer ends it with 0.
TEST_F(FsmTest, ANodeIsDoneOnlyWhenEveryNodesTrainerIs) {
  const GroupAgreedEvent two{std::nullopt, GroupPlace{0, 2, 1, "10.0.0.5", 29500}};
  const StopRequestedEvent peer_failed{StopReason::kPeer, std::nullopt, "node 1: trainer failed: exit code 3"};
  // The group's coordinator answers here (not a LocalCoordinator at once): plain Handle.
  const std::vector<Row> rows = {{StartEvent{}, 0, {"select", "arm:select"}},
                                 {At(std::nullopt), 1, {"propose", "arm:join"}},
                                 {two, 2, {"spawn"}},
                                 {kExit0, 500, {"ended:done", "publish_done", "arm:join"}},
                                 {peer_failed, 600, {"select", "arm:select"}},
                                 {GroupFinishedEvent{}, 601, {}},  // late: this node no longer waits
                                 {At(10), 700, {"propose", "arm:join"}},
                                 {two, 701, {"spawn"}},
                                 {kExit0, 900, {"ended:done", "publish_done", "arm:join"}},
                                 {GroupFinishedEvent{}, 950, {"exit:0"}}};
  Fsm fsm(job_, Counters{}, 1);
  std::vector<Action> last;
  for (std::size_t i = 0; i < rows.size(); ++i) {
    last = fsm.Handle(rows[i].event, t0_ + milliseconds(rows[i].at_ms));
    EXPECT_EQ(Kinds(last), rows[i].expect) << "row " << i;
  }
  EXPECT_EQ(fsm.counters().failures, 0);
  EXPECT_EQ(fsm.phase(), Phase::kFinished);
  ASSERT_TRUE(std::holds_alternative<ExitAction>(last.back()));
  EXPECT_NE(std::get<ExitAction>(last.back()).message.find("every node's trainer (2 nodes)"), std::string::npos);
}

// The peer's notice caps this node's grace as it caps its own.
TEST_F(FsmTest, APeersNoticeCapsTheGrace) {
  job_.signals.grace = seconds(90);
  auto fsm = std::make_unique<Fsm>(job_, Counters{}, 1);
  HandleAsTheDriver(*fsm, StartEvent{}, t0_);
  HandleAsTheDriver(*fsm, At(std::nullopt), t0_);
  const auto actions = fsm->Handle(StopRequestedEvent{StopReason::kPeer, seconds(25), "node 2: notice"}, t0_);
  bool armed = false;
  for (const auto& a : actions) {
    if (const auto* arm = std::get_if<ArmTimerAction>(&a); arm && arm->kind == TimerKind::kGrace) {
      EXPECT_EQ(arm->at, t0_ + seconds(25));
      armed = true;
    }
  }
  EXPECT_TRUE(armed);
}

// What the group hears: each stop of this node's own, first (before its trainer is even
// signalled), with a notice's time left; a crash or a failed start; never a peer's stop
// echoed back, never a success.
TEST_F(FsmTest, EveryStopOfItsOwnIsPublishedFirstAndAPeersNever) {
  const auto publishes = [](const std::vector<Action>& actions) {
    std::vector<const PublishStopAction*> out;
    for (const auto& a : actions) {
      if (const auto* p = std::get_if<PublishStopAction>(&a)) out.push_back(p);
    }
    return out;
  };
  const auto running = [&] {
    auto fsm = std::make_unique<Fsm>(job_, Counters{}, 1);
    HandleAsTheDriver(*fsm, StartEvent{}, t0_);
    HandleAsTheDriver(*fsm, At(std::nullopt), t0_);
    return fsm;
  };
  auto fsm = running();
  auto actions = fsm->Handle(StopRequestedEvent{StopReason::kNotice, seconds(40), "aws spot-itn"}, t0_);
  ASSERT_EQ(publishes(actions).size(), 1u);
  EXPECT_TRUE(std::holds_alternative<PublishStopAction>(actions.front()));
  EXPECT_EQ(publishes(actions)[0]->why, "notice: aws spot-itn");
  EXPECT_EQ(publishes(actions)[0]->grace_cap, seconds(40));
  EXPECT_TRUE(publishes(fsm->Handle(kExit0, t0_ + seconds(1))).empty());  // the stop was told already

  fsm = running();
  actions = fsm->Handle(kExit1, t0_ + seconds(1));
  ASSERT_EQ(publishes(actions).size(), 1u);
  EXPECT_EQ(publishes(actions)[0]->why, "trainer failed: exit code 1");
  EXPECT_EQ(publishes(actions)[0]->failures, 1);  // the job's count with this failure

  fsm = running();
  EXPECT_EQ(publishes(fsm->Handle(SpawnFailedEvent{"exec failed"}, t0_)).size(), 1u);

  fsm = running();
  EXPECT_TRUE(publishes(fsm->Handle(StopRequestedEvent{StopReason::kPeer, std::nullopt, "node 1"}, t0_)).empty());

  fsm = running();
  EXPECT_TRUE(publishes(fsm->Handle(kExit0, t0_ + seconds(1))).empty());  // done is not a stop
}

// One failure budget for the whole group: the count agreed with the group is the floor.
TEST_F(FsmTest, TheGroupsFailureCountIsTheJobsBudget) {
  job_.restart.max_restarts = 3;
  auto fsm = std::make_unique<Fsm>(job_, Counters{}, 1);
  fsm->Handle(StartEvent{}, t0_);
  fsm->Handle(At(std::nullopt), t0_);
  GroupAgreedEvent agreed;
  agreed.group_failures = 3;  // the other nodes failed three times
  fsm->Handle(agreed, t0_);
  EXPECT_EQ(fsm->counters().failures, 3);
  last_ = fsm->Handle(kExit1, t0_ + seconds(1));
  EXPECT_EQ(Kinds(last_), (std::vector<std::string>{"ended:failed", "exit:1"}));  // 4 > max_restarts 3
  bool published = false;
  for (const auto& a : last_) {
    if (const auto* p = std::get_if<PublishStopAction>(&a)) published = p->failures == 4;
  }
  EXPECT_TRUE(published);
}

TEST_F(FsmTest, CustomSuccessCodes) {
  job_.job.success_exit_codes = {0, 42};
  Play({{StartEvent{}, 0, {"select", "arm:select"}},
        {At(7), 1, {"propose", "arm:join", "spawn"}},
        {ChildExitedEvent{ExitStatus{42, 0}}, 9, {"ended:done", "exit:0"}}});
}

TEST_F(FsmTest, CrashRestartsAfterBackoffWithResumePoint) {
  Play({{StartEvent{}, 0, {"select", "arm:select"}},
        {At(std::nullopt), 1, {"propose", "arm:join", "spawn"}},
        {kExit1, 50, {"ended:failed", "arm:backoff"}},
        {TimerFiredEvent{TimerKind::kBackoff}, 150, {"select", "arm:select"}},
        {At(20), 151, {"propose", "arm:join", "spawn"}}});
  const auto& spawn = std::get<SpawnAction>(last_.back());
  ASSERT_TRUE(spawn.resume);
  EXPECT_EQ(spawn.resume->step, 20u);
  EXPECT_EQ(spawn.attempt, 2);
  EXPECT_EQ(spawn.restart_count, 1);
}

TEST_F(FsmTest, SigtermStopsWithGraceThenExits75) {
  Play({{StartEvent{}, 0, {"select", "arm:select"}},
        {At(3), 1, {"propose", "arm:join", "spawn"}},
        {kSigterm, 100, {"signal:SIGTERM/group", "arm:grace"}},
        {kExit0, 200, {"ended:stopped", "exit:75"}}});  // exit 0 after a stop is never "done"
}

TEST_F(FsmTest, GraceExpiryEscalatesToSigkill) {
  Play({{StartEvent{}, 0, {"select", "arm:select"}},
        {At(std::nullopt), 1, {"propose", "arm:join", "spawn"}},
        {kSigterm, 100, {"signal:SIGTERM/group", "arm:grace"}},
        {TimerFiredEvent{TimerKind::kGrace}, 10100, {"kill", "arm:kill"}},
        {kKilled, 10110, {"ended:stopped", "exit:75"}}});
}

TEST_F(FsmTest, SecondSigintKillsAtOnce) {
  Play({{StartEvent{}, 0, {"select", "arm:select"}},
        {At(std::nullopt), 1, {"propose", "arm:join", "spawn"}},
        {kSigterm, 100, {"signal:SIGTERM/group", "arm:grace"}},
        {kSigterm, 200, {"kill", "arm:kill"}},
        {kKilled, 210, {"ended:stopped", "exit:75"}}});
}

TEST_F(FsmTest, MainTargetSignalsOnlyTheMainPid) {
  job_.signals.target = config::SignalTarget::kMain;
  job_.signals.on_notice = SIGINT;
  Play({{StartEvent{}, 0, {"select", "arm:select"}},
        {At(std::nullopt), 1, {"propose", "arm:join", "spawn"}},
        {kSigterm, 5, {"signal:SIGINT/main", "arm:grace"}}});
}

// signals.target: workers (what auto chooses for torchrun): the launcher is paused before its
// workers hear of the stop, released with SIGTERM once they are gone, SIGKILL as ever.
TEST_F(FsmTest, WorkersTargetHoldsTheLauncherUntilTheWorkersAreGone) {
  job_.signals.target = config::SignalTarget::kWorkers;
  Play({{StartEvent{}, 0, {"select", "arm:select"}},
        {At(3), 1, {"propose", "arm:join", "spawn"}},
        {kSigterm, 100, {"hold", "signal:SIGTERM/workers", "watch", "arm:grace"}},
        {WorkersGoneEvent{}, 40100, {"release:SIGTERM", "arm:launcher"}},
        {WorkersGoneEvent{}, 40200, {}},  // released once
        {kExit1, 40300, {"ended:stopped", "exit:75"}},
        {TimerFiredEvent{TimerKind::kLauncher}, 50100, {}}});  // cancelled; late: nothing
}

// torch 1.13's agent, SIGTERM'd inside its own shutdown, can wait on its rendezvous thread
// for ever: once its workers are gone it has signals.kill_timeout to exit, not the grace.
TEST_F(FsmTest, ALauncherThatOutlivesItsWorkersIsKilledAfterTheKillTimeout) {
  job_.signals.target = config::SignalTarget::kWorkers;
  job_.signals.grace = seconds(90);
  const StopRequestedEvent notice{StopReason::kNotice, seconds(120), "aws spot-itn"};
  Play({{StartEvent{}, 0, {"select", "arm:select"}},
        {At(std::nullopt), 1, {"propose", "arm:join", "spawn"}},
        {notice, 100, {"hold", "signal:SIGTERM/workers", "watch", "arm:grace"}},
        {WorkersGoneEvent{}, 40100, {"release:SIGTERM", "arm:launcher"}},
        {TimerFiredEvent{TimerKind::kLauncher}, 50100, {"kill", "arm:kill"}},
        {kKilled, 50110, {"ended:preempted", "validate", "arm:drained"}},  // the workers saved: drained
        {TimerFiredEvent{TimerKind::kGrace}, 90100, {}}});                 // cancelled with the SIGKILL
}

TEST_F(FsmTest, AutoTargetForALauncherIsWorkers) {
  job_.signals.auto_choice = config::SignalTarget::kWorkers;  // what Finalize chose for torchrun
  const StopRequestedEvent notice{StopReason::kNotice, seconds(80), "aws spot-itn"};
  Play({{StartEvent{}, 0, {"select", "arm:select"}},
        {At(std::nullopt), 1, {"propose", "arm:join", "spawn"}},
        {CheckpointRequestedEvent{"cadence"}, 5, {"signal:SIGUSR1/workers"}},  // no hold for a checkpoint
        {notice, 10, {"hold", "signal:SIGTERM/workers", "watch", "arm:grace"}},
        {WorkersGoneEvent{}, 50000, {"release:SIGTERM", "arm:launcher"}},
        {kExit1,
         50100,
         {"ended:preempted", "validate", "arm:drained"}}});  // a launcher's exit code after a notice: drained
  EXPECT_EQ(last_.size(), 7u);  // three cancels, ended, the drained line, the validation, the drained deadline
}

TEST_F(FsmTest, WorkersThatOutliveTheGraceAreKilledWithTheLauncherReleased) {
  job_.signals.target = config::SignalTarget::kWorkers;
  Play({{StartEvent{}, 0, {"select", "arm:select"}},
        {At(std::nullopt), 1, {"propose", "arm:join", "spawn"}},
        {kSigterm, 100, {"hold", "signal:SIGTERM/workers", "watch", "arm:grace"}},
        {TimerFiredEvent{TimerKind::kGrace}, 10100, {"release:SIGTERM", "kill", "arm:kill"}},
        {WorkersGoneEvent{}, 10105, {}},
        {kKilled, 10110, {"ended:stopped", "exit:75"}}});
}

// Workers that sit without CPU while their launcher is held may wait on its rendezvous
// store (torch 2.x): it runs again without a signal of its own, is never held again in this
// stop, and gets signals.kill_timeout to exit after them, as a released one does.
TEST_F(FsmTest, StalledWorkersReleaseTheLauncherWithoutASignal) {
  job_.signals.target = config::SignalTarget::kWorkers;
  job_.signals.grace = seconds(90);
  const StopRequestedEvent notice{StopReason::kNotice, seconds(120), "aws spot-itn"};
  Play({{StartEvent{}, 0, {"select", "arm:select"}},
        {At(std::nullopt), 1, {"propose", "arm:join", "spawn"}},
        {notice, 100, {"hold", "signal:SIGTERM/workers", "watch", "arm:grace"}},
        {WorkersSampledEvent{40, true}, 200, {}},
        {WorkersSampledEvent{41, true}, 300, {}},  // a tick: the window starts again
        {WorkersSampledEvent{41, true}, 5299, {}},
        {WorkersSampledEvent{41, true}, 5300, {"release:none"}},  // no CPU for 5 s, each in a socket wait
        {WorkersSampledEvent{41, true}, 9100, {}},                // once
        {WorkersGoneEvent{}, 12000, {"arm:launcher"}},            // no SIGTERM: it ends by itself
        {kExit0, 12100, {"ended:preempted", "validate", "arm:drained"}}});
}

TEST_F(FsmTest, StalledWorkersChangeNothingOnceTheLauncherIsReleasedOrWithoutOne) {
  job_.signals.target = config::SignalTarget::kGroup;
  Play({{StartEvent{}, 0, {"select", "arm:select"}},
        {At(std::nullopt), 1, {"propose", "arm:join", "spawn"}},
        {WorkersSampledEvent{7, true}, 50, {}},  // not stopping
        {kSigterm, 100, {"signal:SIGTERM/group", "arm:grace"}},
        {WorkersSampledEvent{7, true}, 200, {}},
        {WorkersSampledEvent{7, true}, 5300, {}}});  // nothing is held
}

TEST_F(FsmTest, WorkersThatComputeOrWaitElsewhereAreNeverStalled) {
  job_.signals.target = config::SignalTarget::kWorkers;
  job_.signals.grace = seconds(90);
  Play({{StartEvent{}, 0, {"select", "arm:select"}},
        {At(std::nullopt), 1, {"propose", "arm:join", "spawn"}},
        {kSigterm, 100, {"hold", "signal:SIGTERM/workers", "watch", "arm:grace"}},
        {WorkersSampledEvent{40, false}, 200, {}},
        {WorkersSampledEvent{40, false}, 9000, {}},  // no CPU, but not all in socket waits (a save to disk)
        {WorkersSampledEvent{40, true}, 9100, {}},   // from here on
        {WorkersSampledEvent{45, true}, 14000, {}},  // CPU: busy again
        {WorkersSampledEvent{45, true}, 18000, {}}});
}

TEST_F(FsmTest, WorkersGoneOutsideAStopChangesNothing) {
  job_.signals.target = config::SignalTarget::kWorkers;
  Play({{StartEvent{}, 0, {"select", "arm:select"}},
        {At(std::nullopt), 1, {"propose", "arm:join", "spawn"}},
        {WorkersGoneEvent{}, 5, {}},  // torchrun between two --max_restarts attempts
        {kSigterm, 100, {"hold", "signal:SIGTERM/workers", "watch", "arm:grace"}},
        {kSigterm, 200, {"kill", "arm:kill"}},  // "now": SIGKILL ends the paused launcher too
        {WorkersGoneEvent{}, 205, {}},
        {kKilled, 210, {"ended:stopped", "exit:75"}}});
}

TEST_F(FsmTest, CheckpointRequestIsForwarded) {
  Play({{StartEvent{}, 0, {"select", "arm:select"}},
        {At(std::nullopt), 1, {"propose", "arm:join", "spawn"}},
        {CheckpointRequestedEvent{"SIGUSR1"}, 5, {"signal:SIGUSR1/group"}}});
}

// Issue 35: "checkpoint now" never ends a trainer. With no process of the target that
// catches the signal (its default action would kill it), nothing is sent, for every target,
// and the log says so: at warning level once per attempt, at debug after that.
TEST_F(FsmTest, ACheckpointRequestNobodyCatchesIsSkippedAndSaidOncePerAttempt) {
  for (auto target : {config::SignalTarget::kGroup, config::SignalTarget::kMain, config::SignalTarget::kWorkers}) {
    job_.signals.target = target;
    const CheckpointRequestedEvent uncaught{"aws rebalance", /*nobody_catches=*/true};
    Play({{StartEvent{}, 0, {"select", "arm:select"}},
          {At(std::nullopt), 1, {"propose", "arm:join", "spawn"}},
          {uncaught, 5, {}},
          {uncaught, 6, {}},
          {CheckpointRequestedEvent{"cadence"}, 7, {std::string("signal:SIGUSR1/") + config::ToString(target)}},
          {kExit1, 50, {"ended:failed", "arm:backoff"}},
          {TimerFiredEvent{TimerKind::kBackoff}, 200, {"select", "arm:select"}},
          {At(std::nullopt), 201, {"propose", "arm:join", "spawn"}},
          {uncaught, 205, {}}});
    ASSERT_EQ(last_.size(), 1u);
    const auto& said = std::get<LogAction>(last_[0]);
    EXPECT_EQ(said.level, LogLevel::kWarning) << "a new attempt says it again";
    EXPECT_NE(said.text.find(std::string("event=checkpoint_request_skipped detail=\"aws rebalance\" reason=\"no "
                                         "process catches SIGUSR1\" target=") +
                             config::ToString(target)),
              std::string::npos)
        << said.text;
  }
  Fsm fsm(job_, {}, 1);
  HandleAsTheDriver(fsm, StartEvent{}, t0_);
  HandleAsTheDriver(fsm, At(std::nullopt), t0_);
  const auto first = fsm.Handle(CheckpointRequestedEvent{"cadence", true}, t0_);
  const auto second = fsm.Handle(CheckpointRequestedEvent{"cadence", true}, t0_);
  ASSERT_EQ(first.size(), 1u);
  ASSERT_EQ(second.size(), 1u);
  EXPECT_EQ(std::get<LogAction>(first[0]).level, LogLevel::kWarning);
  EXPECT_EQ(std::get<LogAction>(second[0]).level, LogLevel::kDebug);
}

// Issue 35, item 2: a trainer none of whose processes catches SIGTERM would die on it and lose
// every step since its last save. Under a notice with a deadline it runs on until its next
// good checkpoint lands, then stops at once.
TEST_F(FsmTest, ANoticeForATrainerThatCannotSaveOnItWaitsForItsNextCheckpoint) {
  const auto seen = std::chrono::system_clock::time_point{} + std::chrono::hours(24 * 365 * 55);
  const StopRequestedEvent notice{StopReason::kNotice, std::nullopt, "aws spot-itn", NoticeDeadline{seconds(120), seen},
                                  /*nobody_catches=*/true};
  auto fsm = Play({{StartEvent{}, 0, {"select", "arm:select"}},
                   {At(10), 1, {"propose", "arm:join", "spawn"}},
                   {notice, 100, {"arm:defer", "sample"}}});
  EXPECT_EQ(fsm->phase(), Phase::kDeferred);
  const auto& said = std::get<LogAction>(last_[0]).text;
  const auto cap = seconds(120) - std::chrono::duration_cast<seconds>(job_.provider.safety_margin);
  EXPECT_NE(said.find("event=stop_deferred reason=\"no process catches SIGTERM\" until=" +
                      preemption::FormatIso8601(seen + cap)),
            std::string::npos)
      << said;
  EXPECT_EQ(std::get<ArmTimerAction>(last_[1]).at, t0_ + milliseconds(100) + cap);
  EXPECT_TRUE(fsm->Handle(CheckpointRequestedEvent{"late", true}, t0_ + seconds(1)).size() == 1);  // skipped: a log
  // A checkpoint written before the notice, seen only now, ends nothing: it holds no step the
  // stop at the notice would have lost.
  EXPECT_EQ(Kinds(fsm->Handle(CheckpointLandedEvent{"/ck/ckpt_step29", 29, seen - seconds(2)}, t0_ + seconds(2))),
            std::vector<std::string>{});
  EXPECT_EQ(fsm->phase(), Phase::kDeferred);
  last_ = fsm->Handle(CheckpointLandedEvent{"/ck/ckpt_step30", 30, seen + seconds(19)}, t0_ + seconds(20));
  EXPECT_EQ(Kinds(last_), (std::vector<std::string>{"signal:SIGTERM/group", "arm:grace"}));
  // signals.grace from now, as any notice's stop (well within what is left of its grace).
  EXPECT_EQ(std::get<ArmTimerAction>(last_.back()).at, t0_ + seconds(20) + job_.signals.grace);
  last_ = fsm->Handle(ChildExitedEvent{{0, SIGTERM}}, t0_ + seconds(20) + milliseconds(5));
  EXPECT_EQ(Kinds(last_), (std::vector<std::string>{"ended:preempted", "validate", "arm:drained"}));
  EXPECT_EQ(fsm->counters().preemptions, 1);
}

// No checkpoint before the deadline less provider.safety_margin: the stop comes then, with
// provider.min_grace (the trainer dies on SIGTERM at once; SIGKILL follows the grace).
TEST_F(FsmTest, ADeferredStopEndsAtTheDeadlineLessTheMarginWithoutACheckpoint) {
  const StopRequestedEvent notice{StopReason::kNotice, std::nullopt, "aws spot-itn", NoticeDeadline{seconds(120), {}},
                                  true};
  const auto cap = seconds(120) - std::chrono::duration_cast<seconds>(job_.provider.safety_margin);
  auto fsm = Play({{StartEvent{}, 0, {"select", "arm:select"}},
                   {At(10), 1, {"propose", "arm:join", "spawn"}},
                   {notice, 0, {"arm:defer", "sample"}},
                   {CheckpointLandedEvent{"/ck/ckpt_step9", 9}, 10, {"signal:SIGTERM/group", "arm:grace"}},
                   {kKilled, 20, {"ended:preempted", "validate", "arm:drained"}},
                   {CheckpointLandedEvent{"/ck/ckpt_step10", 10}, 30, {}}});  // drained: no news
  EXPECT_EQ(fsm->phase(), Phase::kDrained);
  Play({{StartEvent{}, 0, {"select", "arm:select"}},
        {At(10), 1, {"propose", "arm:join", "spawn"}},
        {notice, 0, {"arm:defer", "sample"}},
        {TimerFiredEvent{TimerKind::kDefer}, cap.count() * 1000, {"signal:SIGTERM/group", "arm:grace"}}});
  EXPECT_EQ(std::get<ArmTimerAction>(last_.back()).at, t0_ + cap + job_.provider.min_grace);
  // A notice that clears meanwhile: the trainer runs on, and the timer is no news.
  Play({{StartEvent{}, 0, {"select", "arm:select"}},
        {At(10), 1, {"propose", "arm:join", "spawn"}},
        {notice, 0, {"arm:defer", "sample"}},
        {NoticeClearedEvent{}, 10, {}},
        {TimerFiredEvent{TimerKind::kDefer}, 20, {}},
        {CheckpointLandedEvent{"/ck/ckpt_step11", 11}, 30, {}},
        {kExit0, 40, {"ended:done", "exit:0"}}});
  // A stop request while deferred stops at once, as a stop request.
  Play({{StartEvent{}, 0, {"select", "arm:select"}},
        {At(10), 1, {"propose", "arm:join", "spawn"}},
        {notice, 0, {"arm:defer", "sample"}},
        {kSigterm, 10, {"signal:SIGTERM/group", "arm:grace"}},
        {kKilled, 20, {"ended:stopped", "exit:75"}}});
}

// Never stop it while it writes: when the deadline less provider.safety_margin comes while
// the watcher sees a checkpoint being written, the stop waits for the write (once), up to
// kDeferredWriteMargin before the deadline; it lands: the stop then; it does not: the stop
// at that time. Without a write seen, the stop comes at the margin's time as before.
TEST_F(FsmTest, ADeferredStopWhoseTimeComesDuringAWriteWaitsForItWhileTheDeadlineLeavesRoom) {
  const StopRequestedEvent notice{StopReason::kNotice, std::nullopt, "aws spot-itn", NoticeDeadline{seconds(120), {}},
                                  true};
  const auto cap = std::chrono::duration_cast<milliseconds>(seconds(120) - job_.provider.safety_margin).count();
  const auto last = std::chrono::duration_cast<milliseconds>(seconds(120) - kDeferredWriteMargin).count();
  ASSERT_LT(cap, last) << "the defaults leave room between the margin's time and the deadline";
  const CheckpointWritingEvent writing{"/ck/ckpt.pt"};
  const TimerFiredEvent defer{TimerKind::kDefer};
  auto fsm = Play({{StartEvent{}, 0, {"select", "arm:select"}},
                   {At(10), 1, {"propose", "arm:join", "spawn"}},
                   {notice, 0, {"arm:defer", "sample"}},
                   {writing, cap - 50, {}},
                   {defer, cap, {"arm:defer"}}});  // waits for the write
  EXPECT_EQ(fsm->phase(), Phase::kDeferred);
  EXPECT_EQ(std::get<ArmTimerAction>(last_.back()).at, t0_ + milliseconds(last));
  EXPECT_NE(std::get<LogAction>(last_[0]).text.find("event=deferred_stop_extended why=\"a checkpoint is being "
                                                    "written: /ck/ckpt.pt\""),
            std::string::npos);
  last_ = fsm->Handle(CheckpointLandedEvent{"/ck/ckpt.pt", 7}, t0_ + milliseconds(cap + 300));
  EXPECT_EQ(Kinds(last_), (std::vector<std::string>{"signal:SIGTERM/group", "arm:grace"}));  // landed: stop now
  // The write never lands: the stop at the deadline less the write margin, once.
  Play({{StartEvent{}, 0, {"select", "arm:select"}},
        {At(10), 1, {"propose", "arm:join", "spawn"}},
        {notice, 0, {"arm:defer", "sample"}},
        {writing, cap - 50, {}},
        {defer, cap, {"arm:defer"}},
        {writing, cap + 100, {}},
        {defer, last, {"signal:SIGTERM/group", "arm:grace"}}});
  // No write seen: the stop at the margin's time, as before.
  Play({{StartEvent{}, 0, {"select", "arm:select"}},
        {At(10), 1, {"propose", "arm:join", "spawn"}},
        {notice, 0, {"arm:defer", "sample"}},
        {defer, cap, {"signal:SIGTERM/group", "arm:grace"}}});
  // A write seen while running, before the notice, is no reason to wait.
  Play({{StartEvent{}, 0, {"select", "arm:select"}},
        {At(10), 1, {"propose", "arm:join", "spawn"}},
        {writing, 0, {}},
        {notice, 0, {"arm:defer", "sample"}},
        {defer, cap, {"signal:SIGTERM/group", "arm:grace"}}});
}

// Today's stop where deferring gains nothing or is not ours to decide: a trainer that catches
// the signal, a notice without a deadline, signals.defer_stop: never, a deadline too near,
// and a multi-node group (its stop is the group's).
TEST_F(FsmTest, ANoticeStopsAtOnceWhenDeferringGainsNothing) {
  const StopRequestedEvent caught{StopReason::kNotice, std::nullopt, "aws spot-itn", NoticeDeadline{seconds(120), {}},
                                  false};
  const StopRequestedEvent no_deadline{StopReason::kNotice, std::nullopt, "file trigger",
                                       NoticeDeadline{std::nullopt, {}}, true};
  const StopRequestedEvent near{StopReason::kNotice, std::nullopt, "aws spot-itn", NoticeDeadline{seconds(1), {}},
                                true};
  const StopRequestedEvent uncaught{StopReason::kNotice, std::nullopt, "aws spot-itn", NoticeDeadline{seconds(120), {}},
                                    true};
  for (const auto& notice : {caught, no_deadline, near}) {
    Play({{StartEvent{}, 0, {"select", "arm:select"}},
          {At(10), 1, {"propose", "arm:join", "spawn"}},
          {notice, 100, {"signal:SIGTERM/group", "arm:grace"}}});
  }
  job_.signals.defer_stop = false;
  Play({{StartEvent{}, 0, {"select", "arm:select"}},
        {At(10), 1, {"propose", "arm:join", "spawn"}},
        {uncaught, 100, {"signal:SIGTERM/group", "arm:grace"}}});
  job_.signals.defer_stop = true;
  Fsm fsm(job_, {}, 1);
  fsm.Handle(StartEvent{}, t0_);
  fsm.Handle(At(10), t0_);
  fsm.Handle(GroupAgreedEvent{std::nullopt, GroupPlace{0, 2, 1, "10.0.0.5", 29500}}, t0_);
  EXPECT_EQ(Kinds(fsm.Handle(uncaught, t0_)), (std::vector<std::string>{"signal:SIGTERM/group", "arm:grace"}));
}

TEST_F(FsmTest, StopDuringBackoffExits75WithoutStarting) {
  Play({{StartEvent{}, 0, {"select", "arm:select"}},
        {At(std::nullopt), 1, {"propose", "arm:join", "spawn"}},
        {kExit1, 50, {"ended:failed", "arm:backoff"}},
        {kSigterm, 60, {"exit:75"}}});
}

TEST_F(FsmTest, StopWhileSelectingExits75WithoutStarting) {
  Play({{StartEvent{}, 0, {"select", "arm:select"}}, {kSigterm, 1, {}}, {At(9), 2, {"exit:75"}}});
}

TEST_F(FsmTest, MaxRestartsGivesUp) {
  job_.restart.max_restarts = 1;
  Play({{StartEvent{}, 0, {"select", "arm:select"}},
        {At(std::nullopt), 1, {"propose", "arm:join", "spawn"}},
        {kExit1, 50, {"ended:failed", "arm:backoff"}},
        {TimerFiredEvent{TimerKind::kBackoff}, 150, {"select", "arm:select"}},
        {At(std::nullopt), 151, {"propose", "arm:join", "spawn"}},
        {kExit1, 200, {"ended:failed", "exit:1"}}});
  EXPECT_NE(ExitMessage().find("restart.max_restarts = 1"), std::string::npos) << ExitMessage();
}

TEST_F(FsmTest, CrashLoopGivesUpAndSaysWhy) {
  job_.restart.crash_loop = {2, seconds(60)};
  job_.restart.no_progress_limit = 0;
  Play({{StartEvent{}, 0, {"select", "arm:select"}},
        {At(std::nullopt), 1, {"propose", "arm:join", "spawn"}},
        {kExit1, 10, {"ended:failed", "arm:backoff"}},
        {TimerFiredEvent{TimerKind::kBackoff}, 110, {"select", "arm:select"}},
        {At(std::nullopt), 111, {"propose", "arm:join", "spawn"}},
        {kExit1, 120, {"ended:failed", "exit:1"}}});
  EXPECT_NE(ExitMessage().find("crash loop, 2 failures within 1m"), std::string::npos) << ExitMessage();
}

TEST_F(FsmTest, FailuresOutsideTheWindowAreNotACrashLoop) {
  job_.restart.crash_loop = {2, seconds(1)};
  job_.restart.no_progress_limit = 0;
  Play({{StartEvent{}, 0, {"select", "arm:select"}},
        {At(std::nullopt), 1, {"propose", "arm:join", "spawn"}},
        {kExit1, 10, {"ended:failed", "arm:backoff"}},
        {TimerFiredEvent{TimerKind::kBackoff}, 110, {"select", "arm:select"}},
        {At(std::nullopt), 111, {"propose", "arm:join", "spawn"}},
        {kExit1, 5000, {"ended:failed", "arm:backoff"}}});
}

TEST_F(FsmTest, NoProgressGivesUp) {
  job_.restart.no_progress_limit = 2;
  Play({{StartEvent{}, 0, {"select", "arm:select"}},
        {At(10), 1, {"propose", "arm:join", "spawn"}},
        {kExit1, 10, {"ended:failed", "arm:backoff"}},
        {TimerFiredEvent{TimerKind::kBackoff}, 200, {"select", "arm:select"}},
        {At(10), 201, {"propose", "arm:join", "spawn"}},
        {kExit1, 210, {"ended:failed", "arm:backoff"}},
        {TimerFiredEvent{TimerKind::kBackoff}, 500, {"select", "arm:select"}},
        {At(10), 501, {"propose", "arm:join", "exit:1"}}});
  EXPECT_NE(ExitMessage().find("2 restarts in a row without progress (each resumed from step 10"), std::string::npos)
      << ExitMessage();
}

TEST_F(FsmTest, ProgressResetsTheNoProgressStreak) {
  job_.restart.no_progress_limit = 2;
  auto fsm = Play({{StartEvent{}, 0, {"select", "arm:select"}},
                   {At(10), 1, {"propose", "arm:join", "spawn"}},
                   {kExit1, 10, {"ended:failed", "arm:backoff"}},
                   {TimerFiredEvent{TimerKind::kBackoff}, 200, {"select", "arm:select"}},
                   {At(10), 201, {"propose", "arm:join", "spawn"}},
                   {kExit1, 210, {"ended:failed", "arm:backoff"}},
                   {TimerFiredEvent{TimerKind::kBackoff}, 500, {"select", "arm:select"}},
                   {At(11), 501, {"propose", "arm:join", "spawn"}}});
  EXPECT_EQ(fsm->counters().no_progress_streak, 0);
}

// Issue 35: restart.no_progress_limit is for crash loops. Restarts after a notice (or a
// stop request, or a peer's stop) never count, however often the trainer resumes from the
// same step; failures still do, and a newer checkpoint resets the streak either way.
TEST_F(FsmTest, RestartsAfterNoticesNeverCountTowardNoProgress) {
  job_.restart.no_progress_limit = 2;
  job_.provider.resume_after = milliseconds(0);
  const StopRequestedEvent notice{StopReason::kNotice, milliseconds(3000), "aws terminate"};
  std::vector<Row> rows = {{StartEvent{}, 0, {"select", "arm:select"}}, {At(10), 1, {"propose", "arm:join", "spawn"}}};
  long t = 100;
  for (int i = 0; i < 4; ++i, t += 1000) {  // four notices, each resumed from step 10 again
    rows.push_back({notice, t, {"signal:SIGTERM/group", "arm:grace"}});
    rows.push_back({kExit0, t + 10, {"ended:preempted", "validate", "arm:drained"}});
    rows.push_back({NoticeClearedEvent{}, t + 20, {"select", "arm:select"}});
    rows.push_back({At(10), t + 30, {"propose", "arm:join", "spawn"}});
  }
  // Two failures from the same step do give up.
  rows.push_back({kExit1, t, {"ended:failed", "arm:backoff"}});
  rows.push_back({TimerFiredEvent{TimerKind::kBackoff}, t + 200, {"select", "arm:select"}});
  rows.push_back({At(10), t + 201, {"propose", "arm:join", "spawn"}});
  rows.push_back({kExit1, t + 210, {"ended:failed", "arm:backoff"}});
  rows.push_back({TimerFiredEvent{TimerKind::kBackoff}, t + 500, {"select", "arm:select"}});
  rows.push_back({At(10), t + 501, {"propose", "arm:join", "exit:1"}});
  auto fsm = Play(rows);
  EXPECT_EQ(fsm->counters().preemptions, 4);
  EXPECT_NE(ExitMessage().find("2 restarts in a row without progress"), std::string::npos) << ExitMessage();
}

TEST_F(FsmTest, AStartAfterAStoppedSupervisorNeverCountsTowardNoProgress) {
  job_.restart.no_progress_limit = 1;
  Counters restored;
  restored.attempts = 3;
  restored.last_resume_step = 10;
  restored.last_attempt_failed = false;  // the last attempt was stopped (exit 75) or drained
  Play({{StartEvent{}, 0, {"select", "arm:select"}}, {At(10), 1, {"propose", "arm:join", "spawn"}}}, restored);
  restored.last_attempt_failed = true;  // it crashed: this start is a restart after a failure
  Play({{StartEvent{}, 0, {"select", "arm:select"}}, {At(10), 1, {"propose", "arm:join", "exit:1"}}}, restored);
}

TEST_F(FsmTest, HangsHaveTheirOwnBudget) {
  job_.restart.max_hangs = 1;
  job_.restart.no_progress_limit = 0;
  const StopRequestedEvent hang{StopReason::kHang, std::nullopt, "no heartbeat"};
  auto fsm = Play({{StartEvent{}, 0, {"select", "arm:select"}},
                   {At(std::nullopt), 1, {"propose", "arm:join", "spawn"}},
                   {hang, 10, {"signal:SIGTERM/group", "arm:grace"}},
                   {kExit0, 20, {"ended:hang", "arm:backoff"}},
                   {TimerFiredEvent{TimerKind::kBackoff}, 200, {"select", "arm:select"}},
                   {At(std::nullopt), 201, {"propose", "arm:join", "spawn"}},
                   {hang, 210, {"signal:SIGTERM/group", "arm:grace"}},
                   {kExit0, 220, {"ended:hang", "exit:1"}}});
  EXPECT_EQ(fsm->counters().failures, 0);
  EXPECT_NE(ExitMessage().find("restart.max_hangs = 1"), std::string::npos);
}

TEST_F(FsmTest, NoticeDrainsThenResumesWhenClearedWithoutUsingABudget) {
  job_.restart.max_restarts = 0;
  const StopRequestedEvent notice{StopReason::kNotice, milliseconds(3000), "aws terminate"};
  auto fsm = Play({{StartEvent{}, 0, {"select", "arm:select"}},
                   {At(5), 1, {"propose", "arm:join", "spawn"}},
                   {notice, 100, {"signal:SIGTERM/group", "arm:grace"}},
                   {kExit0, 200, {"ended:preempted", "validate", "arm:drained"}},
                   {NoticeClearedEvent{}, 9000, {"arm:resume"}},  // provider.resume_after (5m) first
                   {TimerFiredEvent{TimerKind::kResume}, 309000, {"select", "arm:select"}},
                   {At(6), 309001, {"propose", "arm:join", "spawn"}}});
  EXPECT_EQ(fsm->counters().preemptions, 1);
  EXPECT_EQ(fsm->counters().failures, 0);
}

// The provider may withdraw a notice while the trainer still saves for it (a slow save, a
// loaded machine): the clear is kept, and the drain that follows resumes after
// provider.resume_after instead of waiting for a clear that came already. A notice that
// comes again before the trainer has stopped is in force: that drain waits.
TEST_F(FsmTest, ANoticeClearedWhileTheTrainerStopsForItResumesOnceItHasStopped) {
  job_.restart.max_restarts = 0;
  const StopRequestedEvent notice{StopReason::kNotice, milliseconds(3000), "aws terminate"};
  auto fsm = Play({{StartEvent{}, 0, {"select", "arm:select"}},
                   {At(5), 1, {"propose", "arm:join", "spawn"}},
                   {notice, 100, {"signal:SIGTERM/group", "arm:grace"}},
                   {NoticeClearedEvent{}, 150, {}},
                   {kExit0, 200, {"ended:preempted", "validate", "arm:drained", "arm:resume"}},
                   {TimerFiredEvent{TimerKind::kResume}, 300200, {"select", "arm:select"}},
                   {At(6), 300201, {"propose", "arm:join", "spawn"}},
                   {notice, 300300, {"signal:SIGTERM/group", "arm:grace"}},
                   {NoticeClearedEvent{}, 300350, {}},
                   {notice, 300360, {}},
                   {kExit0, 300400, {"ended:preempted", "validate", "arm:drained"}}});
  EXPECT_EQ(fsm->counters().preemptions, 2);
}

// The Fsm, not the driver, turns a notice's deadline into the grace (notice_grace.hpp):
// the window less provider.safety_margin caps signals.grace, and a deadline too near (or
// already past) still leaves provider.min_grace, said in the log.
TEST_F(FsmTest, TheNoticesDeadlineCapsTheGrace) {
  job_.provider.safety_margin = seconds(5);
  job_.provider.min_grace = seconds(4);
  job_.provider.default_window = seconds(30);
  for (const auto& [left, grace_ms, near] : std::vector<std::tuple<std::optional<milliseconds>, long, bool>>{
           {milliseconds(8000), 3000 + 1000, true},  // 8 s - 5 s = 3 s < min_grace: 4 s
           {milliseconds(-2000), 4000, true},        // already past: min_grace
           {milliseconds(12000), 7000, false},       // 12 s - 5 s
           {std::nullopt, 10000, false}}) {          // no deadline: 30 s - 5 s, capped by signals.grace 10 s
    Fsm fsm(job_, {}, 1);
    fsm.Handle(StartEvent{}, t0_);
    HandleAsTheDriver(fsm, At(5), t0_);
    const auto actions =
        fsm.Handle(StopRequestedEvent{StopReason::kNotice, std::nullopt, "aws terminate", NoticeDeadline{left}}, t0_);
    std::optional<TimePoint> grace_at;
    bool said_near = false;
    for (const auto& a : actions) {
      if (const auto* arm = std::get_if<ArmTimerAction>(&a); arm && arm->kind == TimerKind::kGrace) grace_at = arm->at;
      if (const auto* l = std::get_if<LogAction>(&a)) said_near |= l->text.find("event=notice_deadline_near") == 0;
    }
    ASSERT_TRUE(grace_at) << grace_ms;
    EXPECT_EQ(*grace_at - t0_, milliseconds(grace_ms));
    EXPECT_EQ(said_near, near) << grace_ms;
  }
}

// Drained: the Fsm asks for the drained validation, and only after it tells the provider.
// A cleared notice waits provider.resume_after in the Fsm's own timer; a new notice meanwhile
// disarms it.
TEST_F(FsmTest, DrainedValidatesThenAcknowledgesAndANewNoticeCancelsTheResume) {
  const StopRequestedEvent notice{StopReason::kNotice, std::nullopt, "azure preempt"};
  auto fsm = Play({{StartEvent{}, 0, {"select", "arm:select"}},
                   {At(5), 1, {"propose", "arm:join", "spawn"}},
                   {notice, 100, {"signal:SIGTERM/group", "arm:grace"}},
                   {kExit0, 200, {"ended:preempted", "validate", "arm:drained"}},
                   {DrainedValidatedEvent{}, 300, {"ack"}},
                   {NoticeClearedEvent{}, 9000, {"arm:resume"}},
                   {notice, 9500, {}}});
  bool cancelled = false;
  for (const auto& a : last_) {
    if (const auto* c = std::get_if<CancelTimerAction>(&a)) cancelled |= c->kind == TimerKind::kResume;
  }
  EXPECT_TRUE(cancelled);
  EXPECT_EQ(fsm->phase(), Phase::kDrained);
  EXPECT_TRUE(fsm->Handle(DrainedValidatedEvent{}, t0_ + milliseconds(9600)).size() == 1);  // acknowledged again
}

// A selection that failed (not stuck) and a group that outlived SIGKILL end the run in the
// Fsm, with the words people read.
TEST_F(FsmTest, AFailedSelectionAndAGroupThatSurvivesSigkillExit1) {
  Play({{StartEvent{}, 0, {"select", "arm:select"}}, {SelectionFailedEvent{"ck: permission denied"}, 5, {"exit:1"}}});
  EXPECT_NE(ExitMessage().find("cannot choose a checkpoint to resume from: ck: permission denied"), std::string::npos)
      << ExitMessage();
  Play({{StartEvent{}, 0, {"select", "arm:select"}},
        {At(5), 1, {"propose", "arm:join", "spawn"}},
        {GroupSurvivedKillEvent{4321}, 90, {"exit:1"}}});
  EXPECT_NE(ExitMessage().find("group 4321 survive SIGKILL"), std::string::npos) << ExitMessage();
}

TEST_F(FsmTest, NoticeGraceIsCappedByTheDeadline) {
  const StopRequestedEvent notice{StopReason::kNotice, milliseconds(3000), "aws terminate"};
  Play({{StartEvent{}, 0, {"select", "arm:select"}},
        {At(5), 1, {"propose", "arm:join", "spawn"}},
        {notice, 100, {"signal:SIGTERM/group", "arm:grace"}}});
  const auto& arm = std::get<ArmTimerAction>(last_.back());
  EXPECT_EQ(arm.at, t0_ + milliseconds(100) + milliseconds(3000));
}

TEST_F(FsmTest, SigtermWhileDrainedExits75) {
  const StopRequestedEvent notice{StopReason::kNotice, std::nullopt, "gcp preempted"};
  Play({{StartEvent{}, 0, {"select", "arm:select"}},
        {At(5), 1, {"propose", "arm:join", "spawn"}},
        {notice, 100, {"signal:SIGTERM/group", "arm:grace"}},
        {kExit1, 200, {"ended:preempted", "validate", "arm:drained"}},
        {kSigterm, 300, {"exit:75"}}});
}

TEST_F(FsmTest, NoticeDuringBackoffStartsNoNewChild) {
  const StopRequestedEvent notice{StopReason::kNotice, std::nullopt, "gcp preempted"};
  Play({{StartEvent{}, 0, {"select", "arm:select"}},
        {At(std::nullopt), 1, {"propose", "arm:join", "spawn"}},
        {kExit1, 10, {"ended:failed", "arm:backoff"}},
        {notice, 20, {"validate", "arm:drained"}},
        {TimerFiredEvent{TimerKind::kBackoff}, 120, {}}});
}

TEST_F(FsmTest, BudgetStopExits3) {
  const StopRequestedEvent budget{StopReason::kBudget, std::nullopt, "cost budget"};
  Play({{StartEvent{}, 0, {"select", "arm:select"}},
        {At(1), 1, {"propose", "arm:join", "spawn"}},
        {budget, 5, {"signal:SIGTERM/group", "arm:grace"}},
        {kExit0, 9, {"ended:budget", "exit:3"}}});
}

// Three holes a review found (issue 12.7), one row each.
TEST_F(FsmTest, NoticeDuringSelectionThatClearsResumesAndIsNotDrainedAgain) {
  const StopRequestedEvent notice{StopReason::kNotice, std::nullopt, "gcp preempted"};
  auto fsm = Play({{StartEvent{}, 0, {"select", "arm:select"}},
                   {notice, 1, {}},
                   {At(5), 2, {"validate", "arm:drained"}},       // drained before the start
                   {NoticeClearedEvent{}, 9000, {"arm:resume"}},  // provider.resume_after (5m) first
                   {TimerFiredEvent{TimerKind::kResume}, 309000, {"select", "arm:select"}},
                   {At(5), 309001, {"propose", "arm:join", "spawn"}}});  // resumed, not drained a second time
  EXPECT_EQ(fsm->phase(), Phase::kRunning);
}

TEST_F(FsmTest, BudgetStopDuringSelectionExits3WithoutStartingTheTrainer) {
  const StopRequestedEvent budget{StopReason::kBudget, std::nullopt, "cost budget"};
  const StopRequestedEvent notice{StopReason::kNotice, std::nullopt, "aws terminate"};
  Play({{StartEvent{}, 0, {"select", "arm:select"}}, {budget, 1, {}}, {notice, 2, {}}, {At(5), 3, {"exit:3"}}});
  Play({{StartEvent{}, 0, {"select", "arm:select"}}, {notice, 1, {}}, {budget, 2, {}}, {At(5), 3, {"exit:3"}}});
  Play({{StartEvent{}, 0, {"select", "arm:select"}}, {budget, 1, {}}, {kSigterm, 2, {}}, {At(5), 3, {"exit:75"}}});
}

TEST_F(FsmTest, NoticeDuringAHangStopDrainsInsteadOfRestarting) {
  const StopRequestedEvent hang{StopReason::kHang, std::nullopt, "no heartbeat for 10m"};
  const StopRequestedEvent notice{StopReason::kNotice, milliseconds(2000), "aws terminate"};
  auto fsm = Play({{StartEvent{}, 0, {"select", "arm:select"}},
                   {At(5), 1, {"propose", "arm:join", "spawn"}},
                   {hang, 100, {"signal:SIGTERM/group", "arm:grace"}},  // grace until 10100
                   {notice, 200, {"arm:grace"}},                        // the deadline is nearer: 2200
                   {kKilled, 2300, {"ended:preempted", "validate", "arm:drained"}}});
  EXPECT_EQ(fsm->phase(), Phase::kDrained);
  EXPECT_EQ(fsm->counters().hangs, 0);
  EXPECT_EQ(fsm->counters().preemptions, 1);
}

TEST_F(FsmTest, SpawnFailureCountsAsAFailure) {
  job_.restart.max_restarts = 0;
  Play({{StartEvent{}, 0, {"select", "arm:select"}},
        {At(std::nullopt), 1, {"propose", "arm:join", "spawn"}},
        {SpawnFailedEvent{"ENOMEM"}, 2, {"ended:spawn-failed", "exit:1"}}});
}

TEST_F(FsmTest, BackoffGrowsCapsAndResetsAfterAHealthyRun) {
  job_.restart.backoff = {milliseconds(100), milliseconds(350), 2.0, 0.0, seconds(60)};
  job_.restart.no_progress_limit = 0;
  Counters c;
  Fsm fsm(job_, c, 1);
  std::vector<long> delays;
  TimePoint now = t0_;
  fsm.Handle(StartEvent{}, now);
  for (int i = 0; i < 4; ++i) {
    HandleAsTheDriver(fsm, At(std::nullopt), now);
    now += milliseconds(10);
    for (const auto& a : fsm.Handle(kExit1, now)) {
      if (auto* arm = std::get_if<ArmTimerAction>(&a)) {
        delays.push_back(std::chrono::duration_cast<milliseconds>(arm->at - now).count());
        now = arm->at;
      }
    }
    fsm.Handle(TimerFiredEvent{TimerKind::kBackoff}, now);
  }
  EXPECT_EQ(delays, (std::vector<long>{100, 200, 350, 350}));
  // A run longer than reset_after starts the backoff afresh.
  HandleAsTheDriver(fsm, At(std::nullopt), now);
  now += seconds(61);
  for (const auto& a : fsm.Handle(kExit1, now)) {
    if (auto* arm = std::get_if<ArmTimerAction>(&a)) {
      EXPECT_EQ(std::chrono::duration_cast<milliseconds>(arm->at - now).count(), 100);
    }
  }
}

TEST_F(FsmTest, JitterStaysWithinItsFraction) {
  job_.restart.backoff = {milliseconds(1000), seconds(10), 2.0, 0.2, seconds(60)};
  Counters c;
  c.consecutive_failures = 1;
  Fsm fsm(job_, c, 42);
  long lo = 1 << 30, hi = 0;
  for (int i = 0; i < 500; ++i) {
    const long d = fsm.NextBackoff().count();
    lo = std::min(lo, d);
    hi = std::max(hi, d);
  }
  EXPECT_GE(lo, 800);
  EXPECT_LE(hi, 1200);
  EXPECT_LT(lo, 900);  // it really spreads
  EXPECT_GT(hi, 1100);
}

TEST_F(FsmTest, RestoredCountersContinue) {
  Counters c;
  c.attempts = 7;
  c.failures = 3;
  job_.restart.max_restarts = 3;
  Play({{StartEvent{}, 0, {"select", "arm:select"}},
        {At(4), 1, {"propose", "arm:join", "spawn"}},
        {kExit1, 9, {"ended:failed", "exit:1"}}},
       c);
}

// Deadlines (s6-supervise style): each waiting phase ends by a timer the Fsm arms.
TEST_F(FsmTest, ASelectionThatNeverReturnsEndsWithExit1) {
  job_.checkpoints.dir = "/ck";
  job_.checkpoints.select_timeout = std::chrono::hours(2);
  Play({{StartEvent{}, 0, {"select", "arm:select"}}});
  EXPECT_EQ(std::get<ArmTimerAction>(last_.back()).at, t0_ + std::chrono::hours(2));
  Play({{StartEvent{}, 0, {"select", "arm:select"}}, {TimerFiredEvent{TimerKind::kSelect}, 7200000, {"exit:1"}}});
  EXPECT_NE(ExitMessage().find("checkpoints.select_timeout = 2h"), std::string::npos) << ExitMessage();
  EXPECT_NE(ExitMessage().find("/ck"), std::string::npos) << ExitMessage();
}

TEST_F(FsmTest, AStopThatCameDuringAStuckSelectionDecidesItsExitCode) {
  const StopRequestedEvent notice{StopReason::kNotice, std::nullopt, "gcp preempted"};
  const StopRequestedEvent budget{StopReason::kBudget, std::nullopt, "cost budget"};
  const TimerFiredEvent expired{TimerKind::kSelect};
  Play({{StartEvent{}, 0, {"select", "arm:select"}}, {kSigterm, 5, {}}, {expired, 9, {"exit:75"}}});
  Play({{StartEvent{}, 0, {"select", "arm:select"}}, {notice, 5, {}}, {expired, 9, {"exit:75"}}});
  Play({{StartEvent{}, 0, {"select", "arm:select"}}, {budget, 5, {}}, {expired, 9, {"exit:3"}}});
}

TEST_F(FsmTest, TheSelectionDeadlineEndsWithTheSelection) {
  auto fsm = Play({{StartEvent{}, 0, {"select", "arm:select"}},
                   {At(5), 1, {"propose", "arm:join", "spawn"}},
                   {TimerFiredEvent{TimerKind::kSelect}, 7200000, {}}});  // a late tick changes nothing
  EXPECT_EQ(fsm->phase(), Phase::kRunning);
  job_.checkpoints.select_timeout = milliseconds(0);  // 0: no deadline
  Play({{StartEvent{}, 0, {"select"}}});
}

TEST_F(FsmTest, DrainedForTooLongWithTheMachineStillHereResumes) {
  job_.provider.drained_timeout = std::chrono::minutes(30);
  const StopRequestedEvent notice{StopReason::kNotice, std::nullopt, "aws rebalance"};
  auto fsm = Play({{StartEvent{}, 0, {"select", "arm:select"}},
                   {At(5), 1, {"propose", "arm:join", "spawn"}},
                   {notice, 100, {"signal:SIGTERM/group", "arm:grace"}},
                   {kExit0, 200, {"ended:preempted", "validate", "arm:drained"}}});
  EXPECT_EQ(std::get<ArmTimerAction>(last_.back()).at, t0_ + milliseconds(200) + std::chrono::minutes(30));
  fsm->Handle(TimerFiredEvent{TimerKind::kDrained}, t0_ + milliseconds(200) + std::chrono::minutes(30));
  EXPECT_EQ(fsm->phase(), Phase::kSelecting);
  const auto spawn = HandleAsTheDriver(*fsm, At(6), t0_ + std::chrono::minutes(31));
  EXPECT_EQ(Kinds(spawn), (std::vector<std::string>{"propose", "arm:join", "spawn"}));
  EXPECT_EQ(fsm->counters().preemptions, 1);
  EXPECT_EQ(fsm->counters().failures, 0);
}

TEST_F(FsmTest, AClearedNoticeDisarmsTheDrainedDeadline) {
  const StopRequestedEvent notice{StopReason::kNotice, std::nullopt, "azure preempt"};
  Play({{StartEvent{}, 0, {"select", "arm:select"}},
        {At(5), 1, {"propose", "arm:join", "spawn"}},
        {notice, 100, {"signal:SIGTERM/group", "arm:grace"}},
        {kExit0, 200, {"ended:preempted", "validate", "arm:drained"}},
        {NoticeClearedEvent{}, 9000, {"arm:resume"}},  // provider.resume_after (5m) first
        {TimerFiredEvent{TimerKind::kResume}, 309000, {"select", "arm:select"}}});
  bool cancelled = false;
  for (const auto& a : last_) {
    if (const auto* c = std::get_if<CancelTimerAction>(&a)) cancelled = cancelled || c->kind == TimerKind::kDrained;
  }
  EXPECT_TRUE(cancelled);
  job_.provider.drained_timeout = milliseconds(0);  // 0: drained until the machine goes or the notice clears
  Play({{StartEvent{}, 0, {"select", "arm:select"}},
        {At(5), 1, {"propose", "arm:join", "spawn"}},
        {notice, 100, {"signal:SIGTERM/group", "arm:grace"}},
        {kExit0, 200, {"ended:preempted", "validate"}}});
}

// Room for the group: every start is proposed and agreed (a single node through the
// LocalCoordinator, at once), and the spawn carries the agreed place.
TEST_F(FsmTest, TheProposalCarriesEveryGoodStepNewestFirst) {
  ResumeSelectedEvent selected;
  for (std::uint64_t step : {30u, 20u, 10u}) {
    selected.good.push_back(checkpoint::ResumePoint{"/ck/ckpt_step" + std::to_string(step), step});
  }
  Fsm fsm(job_, {}, 1);
  fsm.Handle(StartEvent{}, t0_);
  const auto actions = fsm.Handle(selected, t0_ + milliseconds(1));
  EXPECT_EQ(Kinds(actions), (std::vector<std::string>{"propose", "arm:join"}));
  EXPECT_EQ(fsm.phase(), Phase::kJoining);
  const auto& proposal = std::get<ProposeResumeAction>(actions[1]);
  ASSERT_EQ(proposal.good.size(), 3u);
  EXPECT_EQ(proposal.good[0].step, 30u);
  EXPECT_EQ(proposal.good[2].step, 10u);
  EXPECT_EQ(proposal.attempt, 1);
  EXPECT_EQ(std::get<ArmTimerAction>(actions[2]).at, t0_ + milliseconds(1) + job_.coordination.join_timeout);
}

TEST_F(FsmTest, ASingleNodeIsRankZeroOfOneWithTheAttemptAsItsEpoch) {
  Counters restored;
  restored.attempts = 7;  // the epoch continues across supervisor restarts
  Play({{StartEvent{}, 0, {"select", "arm:select"}}, {At(20), 1, {"propose", "arm:join", "spawn"}}}, restored);
  const auto& spawn = std::get<SpawnAction>(last_.back());
  ASSERT_TRUE(spawn.resume);
  EXPECT_EQ(spawn.resume->step, 20u);
  EXPECT_EQ(spawn.place.rank, 0);
  EXPECT_EQ(spawn.place.world, 1);
  EXPECT_EQ(spawn.place.epoch, 8u);
  EXPECT_EQ(spawn.attempt, 8);
}

TEST_F(FsmTest, TheSpawnResumesFromWhatTheGroupAgreedWithItsPlace) {
  ResumeSelectedEvent selected{
      {checkpoint::ResumePoint{"/ck/ckpt_step30", 30}, checkpoint::ResumePoint{"/ck/ckpt_step20", 20}}};
  const GroupAgreedEvent agreed{checkpoint::ResumePoint{"/ck/ckpt_step20", 20}, GroupPlace{2, 4, 9}};
  Fsm fsm(job_, {}, 1);
  fsm.Handle(StartEvent{}, t0_);
  fsm.Handle(selected, t0_);
  const auto actions = fsm.Handle(agreed, t0_ + milliseconds(5));
  EXPECT_EQ(Kinds(actions), (std::vector<std::string>{"spawn"}));
  const auto& spawn = std::get<SpawnAction>(actions.back());
  EXPECT_EQ(spawn.resume->step, 20u);  // the older step every peer has
  EXPECT_EQ(spawn.place.rank, 2);
  EXPECT_EQ(spawn.place.world, 4);
  EXPECT_EQ(spawn.place.epoch, 9u);
  EXPECT_EQ(fsm.counters().last_resume_step, std::optional<std::uint64_t>(20));
  EXPECT_TRUE(fsm.Handle(agreed, t0_ + milliseconds(6)).empty());  // agreed once
}

TEST_F(FsmTest, AStopWhileJoiningActsAtOnce) {
  const StopRequestedEvent notice{StopReason::kNotice, std::nullopt, "gcp preempted"};
  const StopRequestedEvent budget{StopReason::kBudget, std::nullopt, "cost budget"};
  const StopRequestedEvent hang{StopReason::kHang, std::nullopt, "no heartbeat"};
  const ResumeSelectedEvent selected{{checkpoint::ResumePoint{"/ck/ckpt_step5", 5}}};
  for (const auto& [stop, expect, after] : std::vector<std::tuple<StopRequestedEvent, std::vector<std::string>, Phase>>{
           {kSigterm, {"exit:75"}, Phase::kFinished},
           {budget, {"exit:3"}, Phase::kFinished},
           {notice, {"validate", "arm:drained"}, Phase::kDrained},
           {hang, {}, Phase::kJoining}}) {
    Fsm fsm(job_, {}, 1);
    fsm.Handle(StartEvent{}, t0_);
    fsm.Handle(selected, t0_);
    EXPECT_EQ(Kinds(fsm.Handle(stop, t0_ + milliseconds(1))), expect) << stop.detail;
    EXPECT_EQ(fsm.phase(), after) << stop.detail;
    // The group's answer after the stop starts nothing.
    EXPECT_EQ(Kinds(fsm.Handle(GroupAgreedEvent{}, t0_ + milliseconds(2))),
              after == Phase::kJoining ? std::vector<std::string>{"spawn"} : std::vector<std::string>{})
        << stop.detail;
  }
}

// coordination.spares: a node that finds every rank held waits as a spare with no deadline
// (the join timeout is off); when it takes a lost rank it selects again (the lost node's
// last save may be newer than what it proposed) and joins as any node does.
TEST_F(FsmTest, ASpareWaitsWithoutADeadlineAndSelectsAgainWhenItTakesARank) {
  job_.coordination.spares = 1;
  const GroupAgreedEvent two{checkpoint::ResumePoint{"/ck/ckpt_step7", 7}, GroupPlace{0, 2, 2, "10.0.0.3", 29500}};
  const std::vector<Row> rows = {{StartEvent{}, 0, {"select", "arm:select"}},
                                 {At(5), 1, {"propose", "arm:join"}},
                                 {GroupSpareEvent{true}, 2, {}},
                                 {TimerFiredEvent{TimerKind::kJoin}, 3'600'000, {}},  // no deadline for a spare
                                 {GroupSpareEvent{true}, 3'600'001, {}},              // said again: nothing new
                                 {GroupSpareEvent{false}, 3'600'500, {"select", "arm:select"}},
                                 {At(7), 3'600'600, {"propose", "arm:join"}},
                                 {two, 3'600'700, {"spawn"}}};
  Fsm fsm(job_, Counters{}, 1);
  for (std::size_t i = 0; i < rows.size(); ++i) {
    last_ = fsm.Handle(rows[i].event, t0_ + milliseconds(rows[i].at_ms));
    EXPECT_EQ(Kinds(last_), rows[i].expect) << "row " << i;
    if (i == 2) {
      EXPECT_EQ(fsm.phase(), Phase::kSpare);
    }
  }
  EXPECT_EQ(fsm.phase(), Phase::kRunning);
  EXPECT_STREQ(PhaseName(Phase::kSpare), "spare");
}

// A spare stopped on request exits 75; a notice drains it and it stops waiting for a rank.
// A node drained for a notice gives its rank up once its checkpoint is validated, when the
// group has spares (without, it keeps the rank until the machine goes).
TEST_F(FsmTest, ASpareStopsAtOnceAndADrainedNodeGivesItsRankToTheSpares) {
  job_.coordination.spares = 1;
  const StopRequestedEvent notice{StopReason::kNotice, std::nullopt, "aws spot-itn"};
  for (const auto& [stop, expect, after] : std::vector<std::tuple<StopRequestedEvent, std::vector<std::string>, Phase>>{
           {kSigterm, {"exit:75"}, Phase::kFinished},
           {notice, {"release_rank", "validate", "arm:drained"}, Phase::kDrained},
           {StopRequestedEvent{StopReason::kPeer, std::nullopt, "node 1: notice"}, {}, Phase::kSpare}}) {
    Fsm fsm(job_, {}, 1);
    fsm.Handle(StartEvent{}, t0_);
    fsm.Handle(At(5), t0_);
    fsm.Handle(GroupSpareEvent{true}, t0_);
    EXPECT_EQ(Kinds(fsm.Handle(stop, t0_ + milliseconds(1))), expect) << stop.detail;
    EXPECT_EQ(fsm.phase(), after) << stop.detail;
  }
  for (const int spares : {1, 0}) {
    job_.coordination.spares = spares;
    Fsm fsm(job_, {}, 1);
    fsm.Handle(StartEvent{}, t0_);
    fsm.Handle(At(5), t0_);
    fsm.Handle(GroupAgreedEvent{std::nullopt, GroupPlace{0, 2, 1, "10.0.0.5", 29500}}, t0_);
    fsm.Handle(notice, t0_ + milliseconds(10));
    fsm.Handle(kExit0, t0_ + milliseconds(500));
    EXPECT_EQ(fsm.phase(), Phase::kDrained);
    const std::vector<std::string> expect =
        spares ? std::vector<std::string>{"ack", "release_rank"} : std::vector<std::string>{"ack"};
    EXPECT_EQ(Kinds(fsm.Handle(DrainedValidatedEvent{}, t0_ + milliseconds(600))), expect) << "spares=" << spares;
  }
}

TEST_F(FsmTest, AGroupThatNeverAgreesEndsWithExit75) {
  job_.coordination.join_timeout = std::chrono::minutes(10);
  Fsm fsm(job_, {}, 1);
  fsm.Handle(StartEvent{}, t0_);
  fsm.Handle(At(5), t0_);
  last_ = fsm.Handle(TimerFiredEvent{TimerKind::kJoin}, t0_ + job_.coordination.join_timeout);
  EXPECT_EQ(Kinds(last_), (std::vector<std::string>{"exit:75"}));
  EXPECT_NE(ExitMessage().find("did not agree on a start within 10m"), std::string::npos) << ExitMessage();
}

TEST(LocalCoordinator, AgreesAtOnceWithTheNewestGoodStep) {
  std::optional<GroupAgreedEvent> agreed;
  LocalCoordinator().Propose(
      ProposeResumeAction{{checkpoint::ResumePoint{"/ck/b", 9}, checkpoint::ResumePoint{"/ck/a", 4}}, 3},
      [&](GroupAgreedEvent e) { agreed = std::move(e); });
  ASSERT_TRUE(agreed);
  ASSERT_TRUE(agreed->point);
  EXPECT_EQ(agreed->point->path, "/ck/b");
  EXPECT_EQ(agreed->place.rank, 0);
  EXPECT_EQ(agreed->place.world, 1);
  EXPECT_EQ(agreed->place.epoch, 3u);
  agreed.reset();
  LocalCoordinator().Propose(ProposeResumeAction{{}, 1}, [&](GroupAgreedEvent e) { agreed = std::move(e); });
  ASSERT_TRUE(agreed);
  EXPECT_FALSE(agreed->point);  // nothing good: a fresh start
  EXPECT_EQ(agreed->place.epoch, 1u);
}

// Every phase × every event: the table says what each phase decides (the phase after, the
// actions). A new event (the peer events of multi-node) fails here until every phase has
// its cell; a new phase until it has its row; a new timer until it has its column (each
// waiting phase's deadline is one of them).
TEST_F(FsmTest, AGrowingGroupStopsATrainerThatSavesOnTheSignalAtOnce) {
  Play({{StartEvent{}, 0, {"select", "arm:select"}},
        {At(10), 10, {"propose", "arm:join", "spawn"}},
        {GroupGrowingEvent{"node 2: joined", /*stop_caught=*/true, /*checkpoint_caught=*/true},
         30,
         {"signal:SIGTERM/group", "arm:grace"}}});
}

TEST_F(FsmTest, AGrowingGroupWhoseTrainerCannotSaveOnTheSignalStopsAtItsNextCheckpointAndTellsThePeers) {
  job_.coordination.grow_wait = seconds(600);
  const auto seen = std::chrono::system_clock::time_point{} + seconds(1'800'000'000);
  auto fsm = Play(
      {{StartEvent{}, 0, {"select", "arm:select"}},
       {At(10), 10, {"propose", "arm:join", "spawn"}},
       {GroupGrowingEvent{"node 2: joined", false, true, seen}, 30, {"arm:defer", "signal:SIGUSR1/group"}},
       // A checkpoint written before the growth holds nothing a stop then would not have kept.
       {CheckpointLandedEvent{"/ck/ckpt_step10", 10, seen - seconds(5)}, 40, {}},
       {CheckpointLandedEvent{"/ck/ckpt_step11", 11, seen + seconds(2)}, 2030, {"signal:SIGTERM/group", "arm:grace"}}});
  EXPECT_EQ(fsm->phase(), Phase::kStopping);
  // The group stops there too: this node tells it, as a growth (never counted).
  bool published = false;
  for (const auto& a : last_) {
    if (const auto* p = std::get_if<PublishStopAction>(&a)) published = p->why.rfind("grow: node 2: joined", 0) == 0;
  }
  EXPECT_TRUE(published);
  Play({{StartEvent{}, 0, {"select", "arm:select"}},
        {At(10), 10, {"propose", "arm:join", "spawn"}},
        {GroupGrowingEvent{"node 2: joined", false, false, seen},
         30,
         {"arm:defer", "arm:handlers"}},  // nothing to ask yet
        {TimerFiredEvent{TimerKind::kDefer}, 600030, {"signal:SIGTERM/group", "arm:grace"}},
        {kExit1, 600040, {"ended:peer-stopped", "select", "arm:select"}}});
}

// A growth that reaches a trainer before it installed its handlers (it started moments ago)
// finds nothing to ask: the wait looks at the handlers again every kHandlersRecheck. Once the
// trainer catches signals.checkpoint it is asked, once; its checkpoint ends the wait. Once it
// catches the stop signal it saves on it: the stop comes at once, told to the group.
TEST_F(FsmTest, AGrowthBeforeTheTrainersHandlersAsksForTheCheckpointOnceTheyAreThere) {
  job_.coordination.grow_wait = seconds(600);
  const auto seen = std::chrono::system_clock::time_point{} + seconds(1'800'000'000);
  const std::vector<Row> to_deferral = {
      {StartEvent{}, 0, {"select", "arm:select"}},
      {At(10), 10, {"propose", "arm:join", "spawn"}},
      {GroupGrowingEvent{"node 2: joined", false, false, seen}, 30, {"arm:defer", "arm:handlers"}},
      {TimerFiredEvent{TimerKind::kHandlers}, 1030, {"sample"}},
      {HandlersSampledEvent{false, false}, 1030, {"arm:handlers"}}};  // still nothing: look again
  auto rows = to_deferral;
  rows.push_back({TimerFiredEvent{TimerKind::kHandlers}, 2030, {"sample"}});
  rows.push_back({HandlersSampledEvent{false, true}, 2030, {"signal:SIGUSR1/group", "arm:handlers"}});
  rows.push_back({TimerFiredEvent{TimerKind::kHandlers}, 3030, {"sample"}});
  rows.push_back({HandlersSampledEvent{false, true}, 3030, {"arm:handlers"}});  // asked once
  rows.push_back(
      {CheckpointLandedEvent{"/ck/ckpt_step11", 11, seen + seconds(4)}, 4030, {"signal:SIGTERM/group", "arm:grace"}});
  auto fsm = Play(rows);
  EXPECT_EQ(fsm->phase(), Phase::kStopping);
  EXPECT_EQ(Kinds(fsm->Handle(TimerFiredEvent{TimerKind::kHandlers}, t0_ + seconds(5))), std::vector<std::string>{})
      << "a stale look after the wait is no news";
  rows = to_deferral;
  rows.push_back({HandlersSampledEvent{true, true}, 1500, {"signal:SIGTERM/group", "arm:grace"}});
  Play(rows);
  bool published = false;
  for (const auto& a : last_) {
    if (const auto* p = std::get_if<PublishStopAction>(&a)) published = p->why.rfind("grow: node 2: joined", 0) == 0;
  }
  EXPECT_TRUE(published) << "the group stops with it";
}

// The same for a notice that comes before the trainer's handlers: the deferral looks at once
// and then every second; a trainer that catches signals.checkpoint is asked for its save
// (once), and the stop goes as soon as it catches SIGTERM (it saves on it), with what is
// left of the notice's grace.
TEST_F(FsmTest, ANoticeBeforeTheTrainersHandlerStopsOnceItCatchesTheSignal) {
  const StopRequestedEvent notice{StopReason::kNotice, std::nullopt, "aws spot-itn", NoticeDeadline{seconds(120), {}},
                                  /*nobody_catches=*/true};
  const auto cap = seconds(120) - std::chrono::duration_cast<seconds>(job_.provider.safety_margin);
  Play({{StartEvent{}, 0, {"select", "arm:select"}},
        {At(10), 1, {"propose", "arm:join", "spawn"}},
        {notice, 0, {"arm:defer", "sample"}},
        {HandlersSampledEvent{false, false}, 0, {"arm:handlers"}},  // nothing yet
        {TimerFiredEvent{TimerKind::kHandlers}, 1000, {"sample"}},
        {HandlersSampledEvent{false, true}, 1000, {"signal:SIGUSR1/group", "arm:handlers"}},  // it saves on request
        {TimerFiredEvent{TimerKind::kHandlers}, 2000, {"sample"}},
        {HandlersSampledEvent{true, true}, 2000, {"signal:SIGTERM/group", "arm:grace"}}});
  const auto& said = std::get<LogAction>(last_[2]).text;
  EXPECT_NE(said.find("event=deferred_stop_ends why=\"the trainer catches SIGTERM now: it saves on the stop\""),
            std::string::npos)
      << said;
  // Its grace: what is left of the deferral's time, at least signals.grace's stop.
  EXPECT_EQ(std::get<ArmTimerAction>(last_.back()).at,
            t0_ + seconds(2) + std::min<std::chrono::milliseconds>(job_.signals.grace, cap - seconds(2)));
}

// A deferred stop's checkpoint is judged with the trainer paused (SIGSTOP to its group): a
// step it trained while spotvisor reads a large checkpoint would be thrown away with the stop.
// Good: the stop's signal, then SIGCONT (it meets the signal first). Not complete yet, or
// written before the deferral: SIGCONT, it trains on. Any other end of the wait thaws it too.
TEST_F(FsmTest, ADeferredStopPausesTheTrainerWhileItsCheckpointIsJudged) {
  const auto seen = std::chrono::system_clock::time_point{} + seconds(1'800'000'000);
  const StopRequestedEvent notice{StopReason::kNotice, std::nullopt, "aws spot-itn", NoticeDeadline{seconds(120), seen},
                                  /*nobody_catches=*/true};
  const std::vector<Row> to_deferral = {{StartEvent{}, 0, {"select", "arm:select"}},
                                        {At(10), 1, {"propose", "arm:join", "spawn"}},
                                        {notice, 0, {"arm:defer", "sample"}}};
  const CheckpointArrivingEvent arriving{"/ck/ckpt_step30", seen + seconds(5)};
  auto rows = to_deferral;
  rows.push_back({CheckpointArrivingEvent{"/ck/ckpt_step29", seen - seconds(1)}, 100, {}});  // older: no pause
  rows.push_back({arriving, 200, {"freeze"}});
  rows.push_back({arriving, 210, {}});  // paused already
  rows.push_back({CheckpointLandedEvent{"/ck/ckpt_step30", 30, seen + seconds(5)},
                  300,
                  {"signal:SIGTERM/group", "arm:grace", "thaw"}});
  Play(rows);
  rows = to_deferral;
  rows.push_back({arriving, 200, {"freeze"}});
  rows.push_back({CheckpointWritingEvent{"/ck/ckpt_step30"}, 300, {"thaw"}});  // not complete: it writes on
  rows.push_back({arriving, 400, {"freeze"}});
  rows.push_back({NoticeClearedEvent{}, 500, {"thaw"}});  // runs on
  auto fsm = Play(rows);
  EXPECT_EQ(fsm->phase(), Phase::kRunning);
  rows = to_deferral;
  rows.push_back({arriving, 200, {"freeze"}});
  rows.push_back({kSigterm, 300, {"signal:SIGTERM/group", "arm:grace", "thaw"}});
  Play(rows);
  rows = to_deferral;
  rows.push_back({arriving, 200, {"freeze"}});
  rows.push_back({TimerFiredEvent{TimerKind::kDefer}, 400, {"signal:SIGTERM/group", "arm:grace", "thaw"}});
  Play(rows);
}

TEST_F(FsmTest, WhileTheGroupWaitsToGrowAPeersStopEndsTheWaitUntoldAndANoticeStopsAtOnce) {
  const std::vector<Row> to_deferral = {
      {StartEvent{}, 0, {"select", "arm:select"}},
      {At(10), 10, {"propose", "arm:join", "spawn"}},
      {GroupGrowingEvent{"node 2: joined", false, false}, 30, {"arm:defer", "arm:handlers"}}};
  auto rows = to_deferral;
  rows.push_back({StopRequestedEvent{StopReason::kPeer, std::nullopt, "node 1: grow: node 2: joined"},
                  40,
                  {"signal:SIGTERM/group", "arm:grace"}});
  Play(rows);
  for (const auto& a : last_) EXPECT_FALSE(std::holds_alternative<PublishStopAction>(a)) << "a peer's stop is not told";
  rows = to_deferral;
  rows.push_back({StopRequestedEvent{StopReason::kNotice, seconds(90), "aws spot-itn"},
                  40,
                  {"signal:SIGTERM/group", "arm:grace"}});
  rows.push_back({NoticeClearedEvent{}, 50, {}});  // the stop goes on: its trainer is stopping
  auto fsm = Play(rows);
  EXPECT_EQ(fsm->phase(), Phase::kStopping);
}

TEST_F(FsmTest, EveryPhaseDecidesEveryEvent) {
  const std::vector<Event> events = {
      StartEvent{},
      ResumeSelectedEvent{},
      SpawnFailedEvent{"exec failed"},
      ChildExitedEvent{{1, 0}},
      StopRequestedEvent{StopReason::kSignal, std::nullopt, "SIGTERM"},
      StopRequestedEvent{StopReason::kPeer, std::nullopt, "node 1: notice"},
      CheckpointRequestedEvent{"SIGUSR1"},
      NoticeClearedEvent{},
      TimerFiredEvent{TimerKind::kGrace},
      TimerFiredEvent{TimerKind::kKill},
      TimerFiredEvent{TimerKind::kBackoff},
      TimerFiredEvent{TimerKind::kSelect},
      TimerFiredEvent{TimerKind::kDrained},
      TimerFiredEvent{TimerKind::kJoin},
      TimerFiredEvent{TimerKind::kLauncher},
      TimerFiredEvent{TimerKind::kResume},
      TimerFiredEvent{TimerKind::kDefer},
      TimerFiredEvent{TimerKind::kHandlers},
      WorkersGoneEvent{},
      WorkersSampledEvent{7, true},
      GroupAgreedEvent{},
      GroupFinishedEvent{},
      SelectionFailedEvent{"permission denied"},
      GroupSurvivedKillEvent{4242},
      DrainedValidatedEvent{},
      GroupSpareEvent{true},
      GroupCutOffEvent{1, milliseconds(0), milliseconds(2000)},
      CheckpointLandedEvent{"/ck/ckpt_step30", 30},
      CheckpointWritingEvent{"/ck/ckpt.pt"},
      GroupGrowingEvent{"node 2: joined the shrunken group", /*stop_caught=*/false, /*checkpoint_caught=*/true},
      HandlersSampledEvent{/*stop_caught=*/true, /*checkpoint_caught=*/false},
      CheckpointArrivingEvent{"/ck/ckpt_step31", std::nullopt},
  };
  // Every alternative of Event has a column, in order; TimerFiredEvent one per TimerKind.
  std::set<std::size_t> kinds_seen;
  std::set<TimerKind> timers_seen;
  for (std::size_t i = 0; i < events.size(); ++i) {
    if (i > 0) {
      ASSERT_GE(events[i].index(), events[i - 1].index()) << "column " << i;
    }
    kinds_seen.insert(events[i].index());
    if (const auto* t = std::get_if<TimerFiredEvent>(&events[i])) timers_seen.insert(t->kind);
  }
  ASSERT_EQ(kinds_seen.size(), std::variant_size_v<Event>) << "an event without a column";
  ASSERT_EQ(timers_seen.size(), std::size(kTimerKinds)) << "a timer without a column";
  const ChildExitedEvent exit0{{0, 0}}, exit1{{1, 0}};
  const StopRequestedEvent notice{StopReason::kNotice, std::nullopt, "aws terminate"};
  const StopRequestedEvent sigterm{StopReason::kSignal, std::nullopt, "SIGTERM"};
  // A notice with a deadline for a trainer that cannot save on SIGTERM: its stop is deferred.
  const StopRequestedEvent uncaught_notice{StopReason::kNotice, std::nullopt, "aws spot-itn",
                                           NoticeDeadline{seconds(120), {}}, /*nobody_catches=*/true};
  const GroupAgreedEvent agreed{};
  const GroupAgreedEvent agreed_by_two{std::nullopt, GroupPlace{0, 2, 1, "10.0.0.5", 29500}};
  // The events that lead to each phase.
  const std::map<Phase, std::vector<Event>> paths = {
      {Phase::kIdle, {}},
      {Phase::kSelecting, {StartEvent{}}},
      {Phase::kJoining, {StartEvent{}, ResumeSelectedEvent{}}},
      {Phase::kRunning, {StartEvent{}, ResumeSelectedEvent{}, agreed}},
      {Phase::kStopping, {StartEvent{}, ResumeSelectedEvent{}, agreed, sigterm}},
      {Phase::kDeferred, {StartEvent{}, ResumeSelectedEvent{}, agreed, uncaught_notice}},
      {Phase::kBackoff, {StartEvent{}, ResumeSelectedEvent{}, agreed, exit1}},
      {Phase::kDrained, {StartEvent{}, ResumeSelectedEvent{}, agreed, notice, exit1}},
      {Phase::kFinishing, {StartEvent{}, ResumeSelectedEvent{}, agreed_by_two, exit0}},
      {Phase::kSpare, {StartEvent{}, ResumeSelectedEvent{}, GroupSpareEvent{true}}},
      {Phase::kFinished, {StartEvent{}, ResumeSelectedEvent{}, agreed, exit0}},
  };
  struct Cell {
    Phase after;
    std::vector<std::string> actions;
  };
  using P = Phase;
  using V = std::vector<std::string>;
  // Columns: start, resume selected, spawn failed, child exited (1), stop (SIGTERM), a
  // peer's stop (only a running trainer stops), checkpoint requested, notice cleared, timers grace / kill / backoff /
  // select / drained / join / launcher (none released in these paths: nothing) / resume, workers gone, workers
  // sampled (nothing is held in these paths: nothing), group agreed, group finished, selection failed, group survived
  // SIGKILL, drained validated, group spare (every rank held: wait as a spare), cut off with a
  // trainer that used no CPU (only a running trainer stops), a new good checkpoint landed (only
  // a deferred stop waits for one), a checkpoint seen being written (remembered: no action), the
  // group grows while the trainer cannot save on the stop (only a running trainer defers its
  // stop to its next checkpoint, asked for with signals.checkpoint), the trainer's handlers
  // read again (only a deferred stop asks: the trainer catches SIGTERM now, so the stop now), a
  // checkpoint about to be judged (only a deferred stop pauses the trainer meanwhile).
  // The timers kDefer's and kHandlers' columns come after kResume's.
  const std::map<Phase, std::vector<Cell>> table = {
      {P::kIdle,
       {{P::kSelecting, V{"select", "arm:select"}},
        {P::kIdle, V{}},
        {P::kIdle, V{}},
        {P::kIdle, V{}},
        {P::kIdle, V{}},
        {P::kIdle, V{}},
        {P::kIdle, V{}},
        {P::kIdle, V{}},
        {P::kIdle, V{}},
        {P::kIdle, V{}},
        {P::kIdle, V{}},
        {P::kIdle, V{}},
        {P::kIdle, V{}},
        {P::kIdle, V{}},
        {P::kIdle, V{}},
        {P::kIdle, V{}},
        {P::kIdle, V{}},
        {P::kIdle, V{}},
        {P::kIdle, V{}},
        {P::kIdle, V{}},
        {P::kIdle, V{}},
        {P::kIdle, V{}},
        {P::kIdle, V{}},
        {P::kIdle, V{}},
        {P::kIdle, V{}},
        {P::kIdle, V{}},
        {P::kIdle, V{}},
        {P::kIdle, V{}},
        {P::kIdle, V{}},
        {P::kIdle, V{}},
        {P::kIdle, V{}},
        {P::kIdle, V{}}}},
      {P::kSelecting, {{P::kSelecting, V{}},        {P::kJoining, V{"propose", "arm:join"}},
                       {P::kSelecting, V{}},        {P::kSelecting, V{}},
                       {P::kSelecting, V{}},        {P::kSelecting, V{}},
                       {P::kSelecting, V{}},        {P::kSelecting, V{}},
                       {P::kSelecting, V{}},        {P::kSelecting, V{}},
                       {P::kSelecting, V{}},        {P::kFinished, V{"exit:1"}},  // the selection is stuck
                       {P::kSelecting, V{}},        {P::kSelecting, V{}},
                       {P::kSelecting, V{}},        {P::kSelecting, V{}},
                       {P::kSelecting, V{}},        {P::kSelecting, V{}},
                       {P::kSelecting, V{}},        {P::kSelecting, V{}},
                       {P::kSelecting, V{}},        {P::kSelecting, V{}},
                       {P::kFinished, V{"exit:1"}}, {P::kSelecting, V{}},
                       {P::kSelecting, V{}},        {P::kSelecting, V{}},
                       {P::kSelecting, V{}},        {P::kSelecting, V{}},
                       {P::kSelecting, V{}},        {P::kSelecting, V{}},
                       {P::kSelecting, V{}},        {P::kSelecting, V{}}}},
      {P::kJoining, {{P::kJoining, V{}},        {P::kJoining, V{}},           {P::kJoining, V{}},
                     {P::kJoining, V{}},        {P::kFinished, V{"exit:75"}}, {P::kJoining, V{}},
                     {P::kJoining, V{}},        {P::kJoining, V{}},           {P::kJoining, V{}},
                     {P::kJoining, V{}},        {P::kJoining, V{}},           {P::kJoining, V{}},
                     {P::kJoining, V{}},        {P::kFinished, V{"exit:75"}},  // the group never agreed
                     {P::kJoining, V{}},        {P::kJoining, V{}},           {P::kJoining, V{}},
                     {P::kJoining, V{}},        {P::kJoining, V{}},           {P::kJoining, V{}},
                     {P::kRunning, V{"spawn"}}, {P::kJoining, V{}},           {P::kJoining, V{}},
                     {P::kJoining, V{}},        {P::kJoining, V{}},           {P::kSpare, V{}},
                     {P::kJoining, V{}},        {P::kJoining, V{}},           {P::kJoining, V{}},
                     {P::kJoining, V{}},        {P::kJoining, V{}},           {P::kJoining, V{}}}},
      {P::kRunning,
       {{P::kRunning, V{}},
        {P::kRunning, V{}},
        {P::kBackoff, V{"ended:spawn-failed", "arm:backoff"}},
        {P::kBackoff, V{"ended:failed", "arm:backoff"}},
        {P::kStopping, V{"signal:SIGTERM/group", "arm:grace"}},
        {P::kStopping, V{"signal:SIGTERM/group", "arm:grace"}},  // the group stops together
        {P::kRunning, V{"signal:SIGUSR1/group"}},
        {P::kRunning, V{}},
        {P::kRunning, V{}},
        {P::kFinished, V{"exit:1"}},  // a group that outlives SIGKILL, whoever sent it
        {P::kRunning, V{}},
        {P::kRunning, V{}},
        {P::kRunning, V{}},
        {P::kRunning, V{}},
        {P::kRunning, V{}},
        {P::kRunning, V{}},
        {P::kRunning, V{}},
        {P::kRunning, V{}},
        {P::kRunning, V{}},
        {P::kRunning, V{}},
        {P::kRunning, V{}},
        {P::kRunning, V{}},
        {P::kRunning, V{}},
        {P::kFinished, V{"exit:1"}},
        {P::kRunning, V{}},
        {P::kRunning, V{}},
        {P::kStopping, V{"signal:SIGTERM/group", "arm:grace"}},
        {P::kRunning, V{}},
        {P::kRunning, V{}},
        {P::kDeferred, V{"arm:defer", "signal:SIGUSR1/group"}},
        {P::kRunning, V{}},
        {P::kRunning, V{}}}},
      {P::kDeferred,
       {{P::kDeferred, V{}},
        {P::kDeferred, V{}},
        {P::kDeferred, V{}},
        {P::kDrained, V{"ended:preempted", "validate", "arm:drained"}},  // the notice's end
        {P::kStopping, V{"signal:SIGTERM/group", "arm:grace"}},          // a stop request: now
        {P::kStopping, V{"signal:SIGTERM/group", "arm:grace"}},          // a peer's stop: the notice's, now
        {P::kDeferred, V{"signal:SIGUSR1/group"}},
        {P::kRunning, V{}},  // the notice went: run on
        {P::kDeferred, V{}},
        {P::kDeferred, V{}},
        {P::kDeferred, V{}},
        {P::kDeferred, V{}},
        {P::kDeferred, V{}},
        {P::kDeferred, V{}},
        {P::kDeferred, V{}},
        {P::kDeferred, V{}},
        {P::kStopping, V{"signal:SIGTERM/group", "arm:grace"}},  // the deadline less the margin
        {P::kDeferred, V{"sample"}},                             // look at the trainer's handlers again
        {P::kDeferred, V{}},
        {P::kDeferred, V{}},
        {P::kDeferred, V{}},
        {P::kDeferred, V{}},
        {P::kDeferred, V{}},
        {P::kFinished, V{"exit:1"}},
        {P::kDeferred, V{}},
        {P::kDeferred, V{}},
        {P::kDeferred, V{}},
        {P::kStopping, V{"signal:SIGTERM/group", "arm:grace"}},  // the checkpoint landed: stop now
        {P::kDeferred, V{}},
        {P::kDeferred, V{}},
        {P::kStopping, V{"signal:SIGTERM/group", "arm:grace"}},  // it catches SIGTERM now: the stop, now
        {P::kDeferred, V{"freeze"}}}},                           // paused while the checkpoint is judged
      {P::kStopping,
       {{P::kStopping, V{}},
        {P::kStopping, V{}},
        {P::kStopping, V{}},
        {P::kFinished, V{"ended:stopped", "exit:75"}},
        {P::kStopping, V{"kill", "arm:kill"}},
        {P::kStopping, V{}},
        {P::kStopping, V{}},
        {P::kStopping, V{}},
        {P::kStopping, V{"kill", "arm:kill"}},
        {P::kFinished, V{"exit:1"}},
        {P::kStopping, V{}},
        {P::kStopping, V{}},
        {P::kStopping, V{}},
        {P::kStopping, V{}},
        {P::kStopping, V{}},
        {P::kStopping, V{}},
        {P::kStopping, V{}},
        {P::kStopping, V{}},
        {P::kStopping, V{}},
        {P::kStopping, V{}},
        {P::kStopping, V{}},
        {P::kStopping, V{}},
        {P::kStopping, V{}},
        {P::kFinished, V{"exit:1"}},
        {P::kStopping, V{}},
        {P::kStopping, V{}},
        {P::kStopping, V{}},
        {P::kStopping, V{}},
        {P::kStopping, V{}},
        {P::kStopping, V{}},
        {P::kStopping, V{}},
        {P::kStopping, V{}}}},
      {P::kBackoff,
       {{P::kBackoff, V{}},
        {P::kBackoff, V{}},
        {P::kBackoff, V{}},
        {P::kBackoff, V{}},
        {P::kFinished, V{"exit:75"}},
        {P::kBackoff, V{}},
        {P::kBackoff, V{}},
        {P::kBackoff, V{}},
        {P::kBackoff, V{}},
        {P::kBackoff, V{}},
        {P::kSelecting, V{"select", "arm:select"}},
        {P::kBackoff, V{}},
        {P::kBackoff, V{}},
        {P::kBackoff, V{}},
        {P::kBackoff, V{}},
        {P::kBackoff, V{}},
        {P::kBackoff, V{}},
        {P::kBackoff, V{}},
        {P::kBackoff, V{}},
        {P::kBackoff, V{}},
        {P::kBackoff, V{}},
        {P::kBackoff, V{}},
        {P::kBackoff, V{}},
        {P::kBackoff, V{}},
        {P::kBackoff, V{}},
        {P::kBackoff, V{}},
        {P::kBackoff, V{}},
        {P::kBackoff, V{}},
        {P::kBackoff, V{}},
        {P::kBackoff, V{}},
        {P::kBackoff, V{}},
        {P::kBackoff, V{}}}},
      {P::kDrained,
       {{P::kDrained, V{}},
        {P::kDrained, V{}},
        {P::kDrained, V{}},
        {P::kDrained, V{}},
        {P::kFinished, V{"exit:75"}},
        {P::kDrained, V{}},
        {P::kDrained, V{}},
        {P::kDrained, V{"arm:resume"}},  // the notice cleared: wait provider.resume_after
        {P::kDrained, V{}},
        {P::kDrained, V{}},
        {P::kDrained, V{}},
        {P::kDrained, V{}},
        {P::kSelecting, V{"select", "arm:select"}},  // the machine stayed: resume
        {P::kDrained, V{}},
        {P::kDrained, V{}},
        {P::kSelecting, V{"select", "arm:select"}},
        {P::kDrained, V{}},  // resume_after passed: resume
        {P::kDrained, V{}},
        {P::kDrained, V{}},
        {P::kDrained, V{}},
        {P::kDrained, V{}},
        {P::kDrained, V{}},
        {P::kDrained, V{}},
        {P::kDrained, V{}},
        {P::kDrained, V{"ack"}},
        {P::kDrained, V{}},
        {P::kDrained, V{}},
        {P::kDrained, V{}},
        {P::kDrained, V{}},
        {P::kDrained, V{}},
        {P::kDrained, V{}},
        {P::kDrained, V{}}}},
      {P::kFinishing,
       {{P::kFinishing, V{}},
        {P::kFinishing, V{}},
        {P::kFinishing, V{}},
        {P::kFinishing, V{}},
        {P::kFinished, V{"exit:75"}},
        {P::kSelecting, V{"select", "arm:select"}},  // a peer failed after this node finished: rejoin
        {P::kFinishing, V{}},
        {P::kFinishing, V{}},
        {P::kFinishing, V{}},
        {P::kFinishing, V{}},
        {P::kFinishing, V{}},
        {P::kFinishing, V{}},
        {P::kFinishing, V{}},
        {P::kFinished, V{"exit:75"}},  // the others did not finish in time
        {P::kFinishing, V{}},
        {P::kFinishing, V{}},
        {P::kFinishing, V{}},
        {P::kFinishing, V{}},
        {P::kFinishing, V{}},
        {P::kFinishing, V{}},
        {P::kFinishing, V{}},
        {P::kFinished, V{"exit:0"}},
        {P::kFinishing, V{}},
        {P::kFinishing, V{}},
        {P::kFinishing, V{}},
        {P::kFinishing, V{}},
        {P::kFinishing, V{}},
        {P::kFinishing, V{}},
        {P::kFinishing, V{}},
        {P::kFinishing, V{}},
        {P::kFinishing, V{}},
        {P::kFinishing, V{}}}},
      {P::kSpare,
       {{P::kSpare, V{}},
        {P::kSpare, V{}},
        {P::kSpare, V{}},
        {P::kSpare, V{}},
        {P::kFinished, V{"exit:75"}},
        {P::kSpare, V{}},
        {P::kSpare, V{}},
        {P::kSpare, V{}},
        {P::kSpare, V{}},
        {P::kSpare, V{}},
        {P::kSpare, V{}},
        {P::kSpare, V{}},
        {P::kSpare, V{}},
        {P::kSpare, V{}},
        {P::kSpare, V{}},
        {P::kSpare, V{}},
        {P::kSpare, V{}},
        {P::kSpare, V{}},
        {P::kSpare, V{}},
        {P::kSpare, V{}},
        {P::kSpare, V{}},
        {P::kFinished, V{"exit:0"}},  // the group finished
        {P::kSpare, V{}},
        {P::kSpare, V{}},
        {P::kSpare, V{}},
        {P::kSpare, V{}},
        {P::kSpare, V{}},
        {P::kSpare, V{}},
        {P::kSpare, V{}},
        {P::kSpare, V{}},
        {P::kSpare, V{}},
        {P::kSpare, V{}}}},
      {P::kFinished,
       {{P::kFinished, V{}}, {P::kFinished, V{}}, {P::kFinished, V{}}, {P::kFinished, V{}}, {P::kFinished, V{}},
        {P::kFinished, V{}}, {P::kFinished, V{}}, {P::kFinished, V{}}, {P::kFinished, V{}}, {P::kFinished, V{}},
        {P::kFinished, V{}}, {P::kFinished, V{}}, {P::kFinished, V{}}, {P::kFinished, V{}}, {P::kFinished, V{}},
        {P::kFinished, V{}}, {P::kFinished, V{}}, {P::kFinished, V{}}, {P::kFinished, V{}}, {P::kFinished, V{}},
        {P::kFinished, V{}}, {P::kFinished, V{}}, {P::kFinished, V{}}, {P::kFinished, V{}}, {P::kFinished, V{}},
        {P::kFinished, V{}}, {P::kFinished, V{}}, {P::kFinished, V{}}, {P::kFinished, V{}}, {P::kFinished, V{}},
        {P::kFinished, V{}}, {P::kFinished, V{}}}}};
  ASSERT_EQ(table.size(), paths.size()) << "a phase without a row";
  for (const auto& [phase, path] : paths) {
    ASSERT_EQ(table.at(phase).size(), events.size()) << "phase " << PhaseName(phase);
    for (std::size_t i = 0; i < events.size(); ++i) {
      Fsm fsm(job_, {}, 1);
      long ms = 0;
      for (const auto& e : path) fsm.Handle(e, t0_ + milliseconds(ms += 10));
      ASSERT_EQ(fsm.phase(), phase) << "the path to phase " << PhaseName(phase);
      const auto actions = fsm.Handle(events[i], t0_ + milliseconds(ms + 10));
      const Cell& cell = table.at(phase)[i];
      EXPECT_EQ(fsm.phase(), cell.after) << "phase " << PhaseName(phase) << ", column " << i;
      EXPECT_EQ(Kinds(actions), cell.actions) << "phase " << PhaseName(phase) << ", column " << i;
    }
  }
}

}  // namespace
}  // namespace spotvisor::supervisor

// The driver's effects, scripted for in-process tests (supervisor_driver_test.cpp): a fake
// Host in virtual time (support/virtual_clock.hpp) whose trainers exit when their script says
// (after a delay, or on a signal), signals to spotvisor at scripted times, a fake watcher
// that delivers notices, state files in memory that can refuse writes (a full disk), a
// resume selector that finds step 20 once a trainer ran, and a group that agrees at once.
// Everything they are asked to do is recorded, with the virtual time it happened at.
#pragma once

#include <algorithm>
#include <boost/asio/io_context.hpp>
#include <boost/asio/post.hpp>
#include <csignal>
#include <memory>
#include <optional>

#include "spotvisor/process/child_table.hpp"
#include "spotvisor/supervisor/host.hpp"
#include "spotvisor/supervisor/posix_host.hpp"
#include "support/virtual_clock.hpp"

namespace spotvisor::supervisor::fake {

namespace asio = boost::asio;
using std::chrono::milliseconds;

// What one fake trainer does: exit by itself after `exit_after` with `status`, and/or exit
// with `on_signal_status` once it receives `exits_on` (0: ignores every signal).
struct Script {
  std::optional<milliseconds> exit_after;
  ExitStatus status;
  int exits_on = 0;
  ExitStatus on_signal_status{0, 0};
  std::optional<milliseconds> notice_after;  // the fake watcher then delivers a stop notice
  milliseconds group_lingers{0};             // members outlive the main process this long, unless killed
  // A launcher (signals.target workers): while HoldLaunchers has it paused its workers use
  // no CPU (they wait on its rendezvous store); released, they stop `after_release` later.
  bool launcher_serves_workers = false;
  milliseconds after_release{0};
  std::vector<int> no_handler_for;  // signals its processes do not catch (Catchers: 0)
};

class FakeHost;

class FakeTrainer final : public Trainer {
 public:
  FakeTrainer(FakeHost& host, pid_t pid, Script script) : host_(host), pid_(pid), script_(std::move(script)) {}
  pid_t pid() const override { return pid_; }
  process::ChildIdentity Identity() const override { return {pid_, 1, "fake-boot"}; }
  std::size_t Send(int signo, config::SignalTarget to, bool only_to_handlers) override;
  std::size_t Catchers(int signo, config::SignalTarget) const override {
    return std::ranges::find(script_.no_handler_for, signo) == script_.no_handler_for.end() ? 1 : 0;
  }
  std::size_t KillGroup() override;
  std::size_t HoldLaunchers() override;
  std::size_t ReleaseLaunchers(int signo) override;
  std::size_t Pause(bool on) override {
    paused_ = on;
    return 1;
  }
  bool WorkersGone() const override { return main_exited_; }
  WorkersActivity Workers() const override;
  std::uint64_t GroupCpuTicks() const override { return cpu_ticks_; }
  bool GroupGone() override;
  void AwaitGroupGone(milliseconds within, std::function<void(bool gone)> done) override;
  std::string LastPids() const override { return std::to_string(pid_); }
  std::size_t LastSkipped() const override { return 0; }
  std::string KilledStates() const override { return std::to_string(pid_) + " fake S"; }
  bool OutputDone() const override { return true; }  // nothing piped
  void DrainOutput(milliseconds, std::function<void()> then) override { then(); }

  void ExitMain(ExitStatus status);
  void PollGroup(SteadyTime deadline, std::function<void(bool gone)> done);

  FakeHost& host_;
  pid_t pid_;
  Script script_;
  bool main_exited_ = false;
  bool killed_ = false;
  bool held_ = false;
  bool paused_ = false;  // Pause(true) without Pause(false) since
  SteadyTime exited_at_{};
  std::uint64_t cpu_ticks_ = 0;  // GroupCpuTicks: a test moves it
};

class FakeWatcher final : public preemption::Watcher {
 public:
  void Start(NoticeHandler on_notice, ClearedHandler on_cleared) override {
    on_notice_ = std::move(on_notice);
    (void)on_cleared;
  }
  void Stop() override { on_notice_ = nullptr; }
  void Acknowledge(const preemption::Notice&) override { ++acknowledged_; }
  NoticeHandler on_notice_;
  int acknowledged_ = 0;
};

// The journal and the notice file in memory. `full` makes every write fail, as a full or
// read-only state dir does; what was refused is not recorded.
class FakeStateFiles final : public StateFiles {
 public:
  const state::PersistedState& state() const override { return state_; }
  std::vector<state::AttemptRecord> ReadAttempts() const override { return attempts_; }
  Status Save(const state::PersistedState& s, Durability) override {
    if (full) return Error{"state.json: No space left on device"};
    state_ = s;
    ++saves;
    return Ok{};
  }
  Status AppendAttempt(const state::AttemptRecord& record) override {
    held_.push_back(record);
    return FlushAttempts();
  }
  Status FlushAttempts() override {
    if (full && !held_.empty()) return Error{"attempts.jsonl: No space left on device"};
    attempts_.insert(attempts_.end(), held_.begin(), held_.end());
    held_.clear();
    return Ok{};
  }
  std::size_t unwritten_attempts() const override { return held_.size(); }
  Status WriteNotice(const std::string& text) override {
    if (full) return Error{"notice.json: No space left on device"};
    notice = text;
    return Ok{};
  }
  void BeforeStart() override { notice.reset(); }

  bool full = false;
  int saves = 0;
  std::optional<std::string> notice;  // the notice file, while there is one
  state::PersistedState state_;
  std::vector<state::AttemptRecord> attempts_;
  std::vector<state::AttemptRecord> held_;  // refused by a full disk, written later
};

// Records every effect; plays the scripts in spawn order.
class FakeHost final : public Host {
 public:
  explicit FakeHost(std::vector<Script> scripts, WallTime wall_start = std::chrono::system_clock::now())
      : clock_(wall_start), scripts_(std::move(scripts)) {}

  void Attach(asio::io_context& io) override {
    io_ = &io;
    children_.emplace();
    for (auto& [after, fn] : at) After(after, std::move(fn));
  }
  std::vector<std::pair<milliseconds, std::function<void()>>> at;  // run at these virtual times after Attach
  void Detach() override { detached_ = true; }
  process::ChildTable& children() override { return *children_; }  // real: no observer here starts one
  Clock& clock() override { return clock_; }
  // Delivers each of `signals_at` (a signal to spotvisor `after` the watch began) that the
  // driver asked for.
  void WatchSignals(const std::vector<int>& signos, std::function<void(int)> on_signal) override {
    watched_signals_ = signos;
    on_signal_ = std::move(on_signal);
    for (const auto& [after, signo] : signals_at) {
      After(after, [this, signo = signo] {
        if (!detached_ && std::find(watched_signals_.begin(), watched_signals_.end(), signo) != watched_signals_.end())
          on_signal_(signo);
      });
    }
  }
  // The real files in the job's state dir (PosixHost's); with `state_in_memory`, files_.
  Result<std::unique_ptr<StateFiles>> OpenState(const config::JobConfig& job, pid_t* holder) override {
    if (!state_in_memory) return MakePosixHost()->OpenState(job, holder);
    *holder = 0;
    auto files = std::make_unique<FakeStateFiles>();
    files_ = files.get();
    return std::unique_ptr<StateFiles>(std::move(files));
  }
  bool state_in_memory = false;
  FakeStateFiles* files_ = nullptr;  // with state_in_memory, from OpenState

  Result<std::unique_ptr<Trainer>> Spawn(const process::SpawnSpec& spec, ExitHandler on_exit, LineHandler) override {
    if (spawns_.size() >= scripts_.size()) return Error{"the test scripted no further trainer"};
    spawns_.push_back(spec);
    spawned_at_.push_back(clock_.elapsed());
    const Script& script = scripts_[spawns_.size() - 1];
    auto trainer = std::make_unique<FakeTrainer>(*this, 1000 + static_cast<pid_t>(spawns_.size()), script);
    live_ = trainer.get();
    on_exit_ = std::move(on_exit);
    if (script.exit_after) After(*script.exit_after, [t = live_, s = script.status] { t->ExitMain(s); });
    if (script.notice_after) {
      After(*script.notice_after, [this] {
        if (watcher_ && watcher_->on_notice_) {
          watcher_->on_notice_(
              preemption::Notice{"file", "file", preemption::NoticeAction::kStop, std::nullopt, "n1", "test notice"});
        }
      });
    }
    return std::unique_ptr<Trainer>(std::move(trainer));
  }

  std::vector<pid_t> Leftovers(const process::ChildIdentity&) override { return {}; }
  bool SignalGroup(pid_t pgid, int signo) override {
    group_signals_.emplace_back(pgid, signo);
    if (signo == SIGKILL && live_ && live_->pid_ == pgid) live_->killed_ = true;
    return true;
  }
  Result<std::unique_ptr<preemption::Watcher>> MakeWatcher(asio::io_context&, const config::ProviderSection&) override {
    auto watcher = std::make_unique<FakeWatcher>();
    watcher_ = watcher.get();
    return std::unique_ptr<preemption::Watcher>(std::move(watcher));
  }

  // Runs `fn` after `delay` of virtual time.
  void After(milliseconds delay, std::function<void()> fn) {
    timers_.push_back(clock_.MakeTimer(*io_));
    timers_.back()->After(delay, std::move(fn));
  }

  // Whatever happens to the trainer's main process goes through here, once.
  void MainExited(FakeTrainer* trainer, ExitStatus status) {
    if (trainer != live_ || trainer->main_exited_ || detached_) return;
    trainer->main_exited_ = true;
    trainer->exited_at_ = clock_.Now();
    exited_at_.push_back(clock_.elapsed());
    auto handler = std::move(on_exit_);
    asio::post(*io_, [handler = std::move(handler), status] { handler(status); });
  }

  testing::VirtualClock clock_;
  std::vector<std::pair<milliseconds, int>> signals_at;  // signals to spotvisor, after the watch began
  std::vector<Script> scripts_;
  std::vector<process::SpawnSpec> spawns_;
  std::vector<milliseconds> spawned_at_;                       // virtual time of each spawn
  std::vector<milliseconds> exited_at_;                        // virtual time each main process ended
  std::vector<std::pair<int, config::SignalTarget>> signals_;  // what Send got
  std::vector<milliseconds> signalled_at_;                     // when, in virtual time
  std::vector<std::pair<pid_t, int>> group_signals_;           // what SignalGroup got
  int group_kills_ = 0;
  std::vector<milliseconds> held_at_;                   // virtual time of each HoldLaunchers that paused one
  std::vector<std::pair<milliseconds, int>> released_;  // ReleaseLaunchers: when, with which signal (0: none)
  std::vector<milliseconds> killed_at_;                 // virtual time of each KillGroup
  asio::io_context* io_ = nullptr;
  std::optional<process::ChildTable> children_;  // from Attach
  FakeTrainer* live_ = nullptr;                  // the newest trainer
  ExitHandler on_exit_;
  FakeWatcher* watcher_ = nullptr;
  std::vector<int> watched_signals_;
  std::function<void(int)> on_signal_;
  std::vector<std::unique_ptr<Timer>> timers_;  // After's
  bool detached_ = false;
};

inline void FakeTrainer::ExitMain(ExitStatus status) { host_.MainExited(this, status); }

inline std::size_t FakeTrainer::Send(int signo, config::SignalTarget to, bool only_to_handlers) {
  if (main_exited_) return 0;
  if (only_to_handlers && Catchers(signo, to) == 0) return 0;
  host_.signals_.emplace_back(signo, to);
  host_.signalled_at_.push_back(host_.clock_.elapsed());
  if (script_.exits_on == signo) {
    host_.After(milliseconds(1), [this, s = script_.on_signal_status] { ExitMain(s); });
  }
  return 1;
}

inline std::size_t FakeTrainer::HoldLaunchers() {
  if (!script_.launcher_serves_workers || main_exited_) return 0;
  held_ = true;
  host_.held_at_.push_back(host_.clock_.elapsed());
  return 1;
}

inline std::size_t FakeTrainer::ReleaseLaunchers(int signo) {
  if (!held_) return 0;
  held_ = false;
  host_.released_.emplace_back(host_.clock_.elapsed(), signo);
  host_.After(script_.after_release, [this] { ExitMain({}); });
  return 1;
}

// Busy workers use a tick per millisecond; ones blocked on the held launcher none, in a
// socket wait.
inline WorkersActivity FakeTrainer::Workers() const {
  if (held_) return {0, true};
  return {static_cast<std::uint64_t>(host_.clock_.elapsed().count()), false};
}

inline std::size_t FakeTrainer::KillGroup() {
  ++host_.group_kills_;
  host_.killed_at_.push_back(host_.clock_.elapsed());
  killed_ = true;
  if (!main_exited_) ExitMain(ExitStatus{0, SIGKILL});
  return 1;
}

inline bool FakeTrainer::GroupGone() {
  return main_exited_ && (killed_ || host_.clock_.Now() - exited_at_ >= script_.group_lingers);
}

// As the child table does: SIGKILL (through the host, so the test sees it) until gone.
inline void FakeTrainer::AwaitGroupGone(milliseconds within, std::function<void(bool gone)> done) {
  const auto deadline = host_.clock_.Now() + within;
  asio::post(*host_.io_, [this, deadline, done = std::move(done)]() mutable { PollGroup(deadline, std::move(done)); });
}

inline void FakeTrainer::PollGroup(SteadyTime deadline, std::function<void(bool gone)> done) {
  if (host_.detached_) return;
  if (GroupGone() || host_.clock_.Now() > deadline) {
    done(GroupGone());  // may end this trainer: nothing after it
    return;
  }
  host_.SignalGroup(pid_, SIGKILL);
  host_.After(milliseconds(5),
              [this, deadline, done = std::move(done)]() mutable { PollGroup(deadline, std::move(done)); });
}

// A resume point that appears once the first attempt has run: the trainer "saved step 20".
class SteppingSelector final : public checkpoint::ResumeSelector {
 public:
  explicit SteppingSelector(std::filesystem::path dir) : dir_(std::move(dir)) {}
  Result<checkpoint::Selection> SelectForResume() override {
    checkpoint::Selection selection;
    if (calls_++ > 0) selection.chosen = checkpoint::ResumePoint{dir_ / "ckpt_step20", 20};
    return selection;
  }
  std::filesystem::path dir_;
  int calls_ = 0;
};

// A group that agrees at once (epoch 1, 2, ...) and, once, tells of a peer's stop
// `peer_stop_after` after the first agreement; records what this node publishes.
class FakeCoordinator final : public Coordinator {
 public:
  // `cut_off`: instead of a peer's stop, this node's lease lapses then (the driver is told).
  FakeCoordinator(asio::io_context& io, Clock& clock, milliseconds peer_stop_after, bool cut_off = false)
      : timer_(clock.MakeTimer(io)), after_(peer_stop_after), cut_off_(cut_off) {}
  void Start(Handlers handlers) override {
    on_peer_stop_ = std::move(handlers.on_peer_stop);
    on_cut_off_ = std::move(handlers.on_cut_off);
  }
  void Propose(const ProposeResumeAction& proposal, AgreedHandler on_agreed) override {
    GroupAgreedEvent agreed;
    if (!proposal.good.empty()) agreed.point = proposal.good.front();
    agreed.place = GroupPlace{1, 2, ++epoch_, "10.0.0.5", 29600};
    on_agreed(std::move(agreed));
    if (epoch_ == 1) {
      timer_->After(after_, [this] {
        if (cut_off_) {
          on_cut_off_();
          return;
        }
        on_peer_stop_(StopRequestedEvent{StopReason::kPeer, std::nullopt, "node 0: notice: test"});
      });
    }
  }
  void PublishStop(const PublishStopAction& stop) override { published_.push_back(stop.why); }
  void Leave(bool finished) override {
    ++left_;
    finished_ = finished;
  }

  std::unique_ptr<Timer> timer_;  // the peer's stop
  milliseconds after_;
  bool cut_off_ = false;
  std::uint64_t epoch_ = 0;
  PeerStopHandler on_peer_stop_;
  CutOffHandler on_cut_off_;
  std::vector<std::string> published_;
  int left_ = 0;
  bool finished_ = false;
};

}  // namespace spotvisor::supervisor::fake

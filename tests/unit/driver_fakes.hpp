// The driver's effects, scripted for in-process tests (supervisor_driver_test.cpp): a fake
// Host whose trainers exit when their script says (after a delay, or on a signal), a fake
// watcher that delivers notices, a resume selector that finds step 20 once a trainer ran,
// and a group that agrees at once. Everything they are asked to do is recorded.
#pragma once

#include <boost/asio/io_context.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/steady_timer.hpp>
#include <csignal>
#include <memory>
#include <optional>
#include <thread>

#include "spotvisor/process/child_table.hpp"
#include "spotvisor/supervisor/host.hpp"
#include "support/log_capture.hpp"
#include "support/test_support.hpp"

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
};

class FakeHost;

class FakeTrainer final : public Trainer {
 public:
  FakeTrainer(FakeHost& host, pid_t pid, Script script) : host_(host), pid_(pid), script_(std::move(script)) {}
  pid_t pid() const override { return pid_; }
  process::ChildIdentity Identity() const override { return {pid_, 1, "fake-boot"}; }
  std::size_t Send(int signo, config::SignalTarget to, bool only_to_handlers) override;
  std::size_t KillGroup() override;
  std::size_t HoldLaunchers() override { return 0; }
  std::size_t ReleaseLaunchers(int) override { return 0; }
  bool WorkersGone() const override { return main_exited_; }
  bool GroupGone() override;
  void AwaitGroupGone(milliseconds within, std::function<void(bool gone)> done) override;
  std::string LastPids() const override { return std::to_string(pid_); }
  std::size_t LastSkipped() const override { return 0; }
  std::string KilledStates() const override { return std::to_string(pid_) + " fake S"; }

  void ExitMain(ExitStatus status);
  void PollGroup(std::chrono::steady_clock::time_point deadline, std::function<void(bool gone)> done);

  FakeHost& host_;
  pid_t pid_;
  Script script_;
  bool main_exited_ = false;
  bool killed_ = false;
  std::chrono::steady_clock::time_point exited_at_{};
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

// Records every effect; plays the scripts in spawn order.
class FakeHost final : public Host {
 public:
  explicit FakeHost(std::vector<Script> scripts) : scripts_(std::move(scripts)) {}

  void Attach(asio::io_context& io) override {
    io_ = &io;
    children_.emplace(io);
  }
  void Detach() override { detached_ = true; }
  process::ChildTable& children() override { return *children_; }  // real: no observer here starts one
  TimePoint Now() const override { return std::chrono::steady_clock::now(); }
  // The real wall clock shifted by `wall_offset` (a test moves the host's idea of the date).
  std::chrono::system_clock::time_point WallNow() const override {
    return std::chrono::system_clock::now() + wall_offset;
  }
  std::chrono::milliseconds wall_offset{0};

  Result<StartedTrainer> Spawn(const process::SpawnSpec& spec, ExitHandler on_exit) override {
    if (spawns_.size() >= scripts_.size()) return Error{"the test scripted no further trainer"};
    spawns_.push_back(spec);
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
    return StartedTrainer{std::move(trainer), -1, -1};
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

  void After(milliseconds delay, std::function<void()> fn) {
    auto timer = std::make_shared<asio::steady_timer>(*io_, delay);
    timer->async_wait([timer, fn = std::move(fn)](const boost::system::error_code& ec) {
      if (!ec) fn();
    });
  }

  // Whatever happens to the trainer's main process goes through here, once.
  void MainExited(FakeTrainer* trainer, ExitStatus status) {
    if (trainer != live_ || trainer->main_exited_ || detached_) return;
    trainer->main_exited_ = true;
    trainer->exited_at_ = std::chrono::steady_clock::now();
    auto handler = std::move(on_exit_);
    asio::post(*io_, [handler = std::move(handler), status] { handler(status); });
  }

  std::vector<Script> scripts_;
  std::vector<process::SpawnSpec> spawns_;
  std::vector<std::pair<int, config::SignalTarget>> signals_;  // what Send got
  std::vector<std::pair<pid_t, int>> group_signals_;           // what SignalGroup got
  int group_kills_ = 0;
  asio::io_context* io_ = nullptr;
  std::optional<process::ChildTable> children_;  // from Attach
  FakeTrainer* live_ = nullptr;                  // the newest trainer
  ExitHandler on_exit_;
  FakeWatcher* watcher_ = nullptr;
  bool detached_ = false;
};

inline void FakeTrainer::ExitMain(ExitStatus status) { host_.MainExited(this, status); }

inline std::size_t FakeTrainer::Send(int signo, config::SignalTarget to, bool) {
  if (main_exited_) return 0;
  host_.signals_.emplace_back(signo, to);
  if (script_.exits_on == signo) {
    host_.After(milliseconds(1), [this, s = script_.on_signal_status] { ExitMain(s); });
  }
  return 1;
}

inline std::size_t FakeTrainer::KillGroup() {
  ++host_.group_kills_;
  killed_ = true;
  if (!main_exited_) ExitMain(ExitStatus{0, SIGKILL});
  return 1;
}

inline bool FakeTrainer::GroupGone() {
  return main_exited_ && (killed_ || std::chrono::steady_clock::now() - exited_at_ >= script_.group_lingers);
}

// As the child table does: SIGKILL (through the host, so the test sees it) until gone.
inline void FakeTrainer::AwaitGroupGone(milliseconds within, std::function<void(bool gone)> done) {
  const auto deadline = std::chrono::steady_clock::now() + within;
  asio::post(*host_.io_, [this, deadline, done = std::move(done)]() mutable { PollGroup(deadline, std::move(done)); });
}

inline void FakeTrainer::PollGroup(std::chrono::steady_clock::time_point deadline,
                                   std::function<void(bool gone)> done) {
  if (host_.detached_) return;
  if (GroupGone() || std::chrono::steady_clock::now() > deadline) {
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

// A drained supervisor waits for the machine to go; SIGTERM to spotvisor ends that wait (as
// systemd does at shutdown). Sent once the log says drained.
inline std::thread StopOnceDrained(const testing::LogCapture& log) {
  return std::thread([&log] {
    if (testing::WaitUntil([&log] { return log.Count("event=drained ") > 0; })) std::raise(SIGTERM);
  });
}

// A group that agrees at once (epoch 1, 2, ...) and, once, tells of a peer's stop
// `peer_stop_after` after the first agreement; records what this node publishes.
class FakeCoordinator final : public Coordinator {
 public:
  FakeCoordinator(asio::io_context& io, milliseconds peer_stop_after) : io_(io), after_(peer_stop_after) {}
  void Start(PeerStopHandler on_peer_stop) override { on_peer_stop_ = std::move(on_peer_stop); }
  void Propose(const ProposeResumeAction& proposal, AgreedHandler on_agreed) override {
    GroupAgreedEvent agreed;
    if (!proposal.good.empty()) agreed.point = proposal.good.front();
    agreed.place = GroupPlace{1, 2, ++epoch_, "10.0.0.5", 29600};
    on_agreed(std::move(agreed));
    if (epoch_ == 1) {
      auto timer = std::make_shared<asio::steady_timer>(io_, after_);
      timer->async_wait([this, timer](const boost::system::error_code& ec) {
        if (!ec) on_peer_stop_(StopRequestedEvent{StopReason::kPeer, std::nullopt, "node 0: notice: test"});
      });
    }
  }
  void PublishStop(const PublishStopAction& stop) override { published_.push_back(stop.why); }
  void Leave(bool finished) override {
    ++left_;
    finished_ = finished;
  }

  asio::io_context& io_;
  milliseconds after_;
  std::uint64_t epoch_ = 0;
  PeerStopHandler on_peer_stop_;
  std::vector<std::string> published_;
  int left_ = 0;
  bool finished_ = false;
};

}  // namespace spotvisor::supervisor::fake

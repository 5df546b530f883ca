// The real Host; see posix_host.hpp. One signal_set for SIGCHLD, on which the child table
// reaps every exited child; the trainer's main process has its status delivered once, on
// the io thread (the table may have been called from a mirror upload thread).
#include "spotvisor/supervisor/posix_host.hpp"

#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>

#include <algorithm>
#include <boost/asio/io_context.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/signal_set.hpp>
#include <csignal>
#include <map>
#include <optional>
#include <vector>

#include "child_environment.hpp"
#include "spotvisor/process/child_table.hpp"
#include "spotvisor/process/output_relay.hpp"
#include "spotvisor/state/job_lock.hpp"
#include "spotvisor/util/atomic_file.hpp"
#include "trainer_signals.hpp"

namespace spotvisor::supervisor {
namespace {

namespace asio = boost::asio;

// Set by a stop signal after Detach (a signal handler can do no more than this).
volatile std::sig_atomic_t g_hurried = 0;

extern "C" void OnLateSignal(int) { g_hurried = 1; }

ExitStatus FromWaitStatus(int status) {
  if (WIFSIGNALED(status)) return ExitStatus{0, WTERMSIG(status)};
  return ExitStatus{WEXITSTATUS(status), 0};
}

class PosixHost;

// A trainer group: signals through TrainerSignals, its end read from the kernel.
class PosixTrainer final : public Trainer {
 public:
  PosixTrainer(PosixHost& host, pid_t pid, std::shared_ptr<process::OutputRelay> output)
      : host_(host), signals_(pid), identity_(process::Identify(pid)), output_(std::move(output)) {}
  pid_t pid() const override { return identity_.pid; }
  process::ChildIdentity Identity() const override { return identity_; }
  std::size_t Send(int signo, config::SignalTarget to, bool only_to_handlers) override {
    return signals_.Send(signo, to, only_to_handlers);
  }
  std::size_t Catchers(int signo, config::SignalTarget to) const override { return signals_.Catchers(signo, to); }
  std::size_t KillGroup() override { return signals_.KillGroup(); }
  std::size_t HoldLaunchers() override { return signals_.HoldLaunchers(); }
  std::size_t Pause(bool on) override { return signals_.Pause(on); }
  std::size_t ReleaseLaunchers(int signo) override { return signals_.ReleaseLaunchers(signo); }
  bool WorkersGone() const override { return signals_.WorkersGone(); }
  WorkersActivity Workers() const override { return signals_.Workers(); }
  std::uint64_t GroupCpuTicks() const override {
    std::uint64_t ticks = 0;
    for (pid_t member : process::GroupMembers(identity_.pid)) {
      if (auto stat = process::ReadProcStat(member)) ticks += stat->cpu_ticks;
    }
    return ticks;
  }
  bool GroupGone() override;
  void AwaitGroupGone(std::chrono::milliseconds within, std::function<void(bool gone)> done) override;
  std::string LastPids() const override { return signals_.LastPids(); }
  std::size_t LastSkipped() const override { return signals_.LastSkipped(); }
  std::string KilledStates() const override { return signals_.KilledStates(); }
  bool OutputDone() const override { return !output_ || output_->done(); }
  void DrainOutput(std::chrono::milliseconds within, std::function<void()> then) override {
    output_->Drain(within, std::move(then));
  }

 private:
  PosixHost& host_;                               // reaps the group's zombies
  TrainerSignals signals_;                        // to the group, the main process or the workers
  process::ChildIdentity identity_;               // pid, start time, boot id
  std::shared_ptr<process::OutputRelay> output_;  // its piped output (null: not piped), also the host's
};

// The lock file, the journal and the notice file, on disk.
class PosixStateFiles final : public StateFiles {
 public:
  PosixStateFiles(const config::JobConfig& job, state::JobLock lock, state::Journal journal)
      : job_(job), lock_(std::move(lock)), journal_(std::move(journal)) {}
  const state::PersistedState& state() const override { return journal_.state(); }
  std::vector<state::AttemptRecord> ReadAttempts() const override { return journal_.ReadAttempts(); }
  Status Save(const state::PersistedState& s, Durability durability) override { return journal_.Save(s, durability); }
  Status AppendAttempt(const state::AttemptRecord& record) override { return journal_.AppendAttempt(record); }
  Status FlushAttempts() override { return journal_.FlushAttempts(); }
  std::size_t unwritten_attempts() const override { return journal_.unwritten_attempts(); }
  // Atomic (the trainer never reads half of it) but not fsynced: it sits between the
  // notice and the signal, where an fsync costs tens of ms on a busy disk, and no one
  // reads it after a power cut (it is removed before a resumed trainer starts).
  Status WriteNotice(const std::string& text) override {
    return WriteFileAtomically(NoticeFilePath(job_), text, Durability::kAtomicOnly);
  }
  void BeforeStart() override {
    std::error_code ec;
    if (job_.checkpoints.dir) std::filesystem::create_directories(*job_.checkpoints.dir, ec);
    std::filesystem::remove(NoticeFilePath(job_), ec);
  }

 private:
  const config::JobConfig& job_;  // not owned
  state::JobLock lock_;           // held until the driver lets go of these files
  state::Journal journal_;        // state.json and attempts.jsonl
};

class PosixHost final : public Host {
 public:
  void Attach(asio::io_context& io) override {
    prctl(PR_SET_CHILD_SUBREAPER, 1);
    // Our stdout/stderr may be a pipe whose reader goes away (`| head`, a dead log
    // collector): a write must fail with EPIPE, not kill the supervisor and so the trainer.
    // Not a handler, only a disposition; the child starts with SIG_DFL for every signal.
    std::signal(SIGPIPE, SIG_IGN);
    io_ = &io;
    table_.emplace();
    children_.emplace(io, SIGCHLD);
    WaitChildren();
  }

  void Detach() override {
    detached_ = true;
    if (children_) children_->cancel();
    if (requests_) {
      // After the exit line a stop signal hurries the exit: the mirror's last uploads (up to
      // the notice's deadline) are cancelled, and spotvisor ends with the code it logged,
      // its state and report written. The handler replaces asio's in one sigaction, so no
      // signal finds the default action (which would end spotvisor before its state is saved).
      requests_->cancel();
      InstallLateHandlers();
    }
    trainer_watches_.clear();  // no trainer's end is awaited after the exit line
    exits_.clear();
    for (auto& relay : relays_) relay->Drain(kOutputDrain);  // the group is gone: EOF is near
  }

  // asio gives a signal its default action back when its signal_set goes, and spotvisor still
  // writes its state and report after that: a stop signal then must not end it with 143.
  ~PosixHost() override {
    requests_.reset();
    if (detached_) InstallLateHandlers();
  }

  void HurryOn(const std::vector<int>& signos) override { hurry_ = signos; }
  bool Hurried() const override { return g_hurried != 0; }

  process::ChildTable& children() override { return *table_; }

  Clock& clock() override { return SystemClock(); }

  void WatchSignals(const std::vector<int>& signos, std::function<void(int)> on_signal) override {
    requests_.emplace(*io_);
    for (int signo : signos) requests_->add(signo);
    signos_ = signos;
    on_request_ = std::move(on_signal);
    WaitRequests();
  }

  Result<std::unique_ptr<StateFiles>> OpenState(const config::JobConfig& job, pid_t* holder) override {
    auto lock = state::JobLock::Acquire(job.telemetry.state_dir, holder);
    if (!lock) return lock.error();
    auto journal = state::Journal::Open(job.telemetry.state_dir);
    if (!journal) return journal.error();
    return std::unique_ptr<StateFiles>(std::make_unique<PosixStateFiles>(job, std::move(*lock), std::move(*journal)));
  }

  Result<std::unique_ptr<Trainer>> Spawn(const process::SpawnSpec& spec, ExitHandler on_exit,
                                         LineHandler on_line) override {
    // Any thread may reap it: the handler runs on ours, after this call has set `pid`.
    auto pid = std::make_shared<pid_t>(0);
    auto child = table_->Spawn(spec, [this, io = io_, pid](int wait_status) {
      asio::post(*io, [this, pid, wait_status] { Exited(*pid, wait_status); });
    });
    if (!child) return child.error();
    *pid = child->pid;
    exits_[child->pid] = std::move(on_exit);
    std::shared_ptr<process::OutputRelay> output;
    if (child->stdout_fd >= 0) {
      std::erase_if(relays_, [](const auto& r) { return r->done(); });
      output = std::make_shared<process::OutputRelay>(*io_, child->stdout_fd, child->stderr_fd, std::move(on_line));
      relays_.push_back(output);
    }
    return std::unique_ptr<Trainer>(std::make_unique<PosixTrainer>(*this, child->pid, std::move(output)));
  }

  std::vector<pid_t> Leftovers(const process::ChildIdentity& child) override { return process::FindLeftovers(child); }
  bool SignalGroup(pid_t pgid, int signo) override { return process::SignalGroup(pgid, signo); }

  Result<std::unique_ptr<preemption::Watcher>> MakeWatcher(asio::io_context& io,
                                                           const config::ProviderSection& provider) override {
    return preemption::MakeWatcher(io, clock(), provider);
  }

  // Reaps every exited child: the trainer, hooks, mirror commands, adopted orphans. A
  // trainer's status reaches its handler through a post, never mid-reap.
  void Reap() { table_->Reap(); }

  // A trainer's group watch: ended at Detach (no callback after the exit line), unlike the
  // commands' watches, which a mirror's last uploads still need.
  void AwaitGroupGone(pid_t pgid, std::chrono::milliseconds within, std::function<void(bool gone)> done) {
    std::erase_if(trainer_watches_, [](const process::GroupWatch& w) { return w.ended(); });
    trainer_watches_.push_back(table_->WatchGroup(*io_, pgid, within, std::move(done)));
  }

 private:
  void Exited(pid_t pid, int wait_status) {
    auto it = exits_.find(pid);
    if (detached_ || it == exits_.end()) return;
    ExitHandler handler = std::move(it->second);
    exits_.erase(it);
    handler(FromWaitStatus(wait_status));
  }

  void WaitRequests() {
    requests_->async_wait([this](const boost::system::error_code& ec, int signo) {
      if (ec || detached_) return;  // cancelled at shutdown
      on_request_(signo);
      if (!detached_) WaitRequests();  // a stop may have ended the run
    });
  }

  void InstallLateHandlers() {
    for (int signo : signos_) {
      struct sigaction late {};
      const bool hurries = std::find(hurry_.begin(), hurry_.end(), signo) != hurry_.end();
      late.sa_handler = hurries ? OnLateSignal : SIG_IGN;
      sigemptyset(&late.sa_mask);
      sigaction(signo, &late, nullptr);
    }
  }

  void WaitChildren() {
    children_->async_wait([this](const boost::system::error_code& ec, int) {
      if (ec) return;  // cancelled at shutdown
      Reap();
      if (!detached_) WaitChildren();  // a handler may have ended the run
    });
  }

  asio::io_context* io_ = nullptr;            // from Attach
  std::optional<process::ChildTable> table_;  // every child of the run; from Attach
  std::optional<asio::signal_set> children_;  // SIGCHLD
  std::optional<asio::signal_set> requests_;  // WatchSignals's
  std::function<void(int)> on_request_;       // WatchSignals's handler
  std::vector<int> signos_;                   // WatchSignals's signals
  std::vector<int> hurry_;                    // HurryOn's: after Detach they hurry the exit, the rest are ignored
  std::map<pid_t, ExitHandler> exits_;        // trainers whose main process still runs
  std::vector<process::GroupWatch> trainer_watches_;  // AwaitGroupGone's; after table_: cancelled before it goes
  std::vector<std::shared_ptr<process::OutputRelay>> relays_;  // trainers' output, until EOF
  bool detached_ = false;                                      // no more waiting, no more callbacks
};

bool PosixTrainer::GroupGone() {
  host_.Reap();  // a group member that exited is a zombie (ours, as subreaper) until reaped
  return !process::GroupExists(identity_.pid);
}

void PosixTrainer::AwaitGroupGone(std::chrono::milliseconds within, std::function<void(bool gone)> done) {
  host_.AwaitGroupGone(identity_.pid, within, std::move(done));
}

}  // namespace

std::unique_ptr<Host> MakePosixHost() { return std::make_unique<PosixHost>(); }

}  // namespace spotvisor::supervisor

// The real CommandRunner; see command.hpp. A Running per command, owned by the runner's
// map and by the handlers in flight; every step on the io thread: started → exited (the
// pidfd turns readable → Reap → the status, posted here) or killed first (deadline,
// Cancel; its status then within kAfterKill) → the rest of the group swept and the output
// drained → done. A handler that finds `owner` null belongs to a destroyed runner.
#include "spotvisor/process/command.hpp"

#include <signal.h>
#include <sys/wait.h>

#include <boost/asio/io_context.hpp>
#include <boost/asio/posix/stream_descriptor.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/steady_timer.hpp>
#include <cstring>
#include <mutex>
#include <optional>

#include "spotvisor/process/child_table.hpp"
#include "spotvisor/process/output_relay.hpp"
#include "spotvisor/process/process_group.hpp"
#include "spotvisor/util/units.hpp"

namespace spotvisor::process {
namespace {

namespace asio = boost::asio;
using std::chrono::steady_clock;

constexpr auto kAfterKill = std::chrono::seconds(10);              // a SIGKILLed main process's status
constexpr auto kGroupWithin = std::chrono::seconds(10);            // the rest of its group, after SIGKILL
constexpr auto kDrainAfterExit = std::chrono::seconds(2);          // output a process that left the group holds
constexpr auto kReapWithoutPidfd = std::chrono::milliseconds(50);  // kernels before 5.3 only

std::string SignalAbbrev(int signo) {
  const char* abbrev = sigabbrev_np(signo);
  return abbrev ? std::string("SIG") + abbrev : "signal " + std::to_string(signo);
}

class RealCommandRunner;

struct RunningCommand {
  explicit RunningCommand(asio::io_context& io) : exit_watch(io), deadline(io), reap(io) {}
  RealCommandRunner* owner = nullptr;         // null once the runner is gone
  CommandRunner::Id id = 0;                   // the runner's key
  pid_t pid = 0;                              // also the group id; 0 when it did not start
  CommandOutcome outcome;                     // filled in step by step
  CommandRunner::Done done;                   // called once, by Finish
  asio::posix::stream_descriptor exit_watch;  // the pidfd: readable once the main process exited
  asio::steady_timer deadline;                // the spec's timeout, then kAfterKill
  asio::steady_timer reap;                    // reaping without a pidfd
  std::unique_ptr<OutputRelay> relay;         // with on_line
  GroupWatch group;                           // the rest of its group, once the main process exited
  steady_clock::time_point started;           // for the duration
  std::optional<CommandEnd> killed;           // why we SIGKILLed it, if we did
  bool exited = false, group_done = false, output_done = false, finished = false;
};

using RunningPtr = std::shared_ptr<RunningCommand>;

// Where the reaping thread leaves a status for the io thread. Closed (io null) by the
// runner's destructor, after which nothing is posted: the io_context may be gone next.
struct Mailbox {
  std::mutex mutex;                // held while posting and while closing
  asio::io_context* io = nullptr;  // the runner's
};

class RealCommandRunner final : public CommandRunner {
 public:
  RealCommandRunner(asio::io_context& io, ChildTable& children)
      : io_(io), children_(children), mailbox_(std::make_shared<Mailbox>()) {
    mailbox_->io = &io;
  }
  ~RealCommandRunner() override;
  RealCommandRunner(const RealCommandRunner&) = delete;
  RealCommandRunner& operator=(const RealCommandRunner&) = delete;

  Id Start(const CommandSpec& spec, Done done) override;
  void Cancel(Id id) override;
  void CancelAll() override;
  pid_t pid(Id id) const override;
  std::size_t running() const override { return running_.size(); }

 private:
  RunningPtr Make(const CommandSpec& spec, Done done);
  bool Spawn(const RunningPtr& r, const CommandSpec& spec);
  void WatchExit(const RunningPtr& r, int pidfd);
  void ReapWithoutPidfd(const RunningPtr& r);
  void Kill(const RunningPtr& r, CommandEnd why);
  void Exited(const RunningPtr& r, std::optional<int> wait_status);
  void Finish(const RunningPtr& r);

  asio::io_context& io_;              // every handler runs here
  ChildTable& children_;              // starts and reaps; outlives us
  std::shared_ptr<Mailbox> mailbox_;  // shared with the table's callbacks
  Id next_ = 1;                       // the next command's id
  std::map<Id, RunningPtr> running_;  // started, not finished
};

RealCommandRunner::~RealCommandRunner() {
  {
    std::lock_guard lock(mailbox_->mutex);
    mailbox_->io = nullptr;
  }
  for (auto& [id, r] : running_) {
    r->owner = nullptr;
    if (r->pid > 0 && !r->exited) {
      SignalGroup(r->pid, SIGKILL);
      children_.Unwatch(r->pid);  // reaped later without a call
    }
    r->deadline.cancel();
    r->reap.cancel();
    r->group.Cancel();
    r->relay.reset();
    boost::system::error_code ignored;
    r->exit_watch.close(ignored);
  }
}

CommandRunner::Id RealCommandRunner::Start(const CommandSpec& spec, Done done) {
  auto r = Make(spec, std::move(done));
  running_[r->id] = r;
  if (!Spawn(r, spec)) {
    r->exited = r->group_done = r->output_done = true;
    asio::post(io_, [r] {
      if (r->owner) r->owner->Finish(r);
    });
    return r->id;
  }
  r->deadline.expires_after(spec.timeout);
  r->deadline.async_wait([r](const boost::system::error_code& ec) {
    if (!ec && r->owner) r->owner->Kill(r, CommandEnd::kTimedOut);
  });
  return r->id;
}

RunningPtr RealCommandRunner::Make(const CommandSpec& spec, Done done) {
  auto r = std::make_shared<RunningCommand>(io_);
  r->owner = this;
  r->id = next_++;
  r->done = std::move(done);
  r->started = steady_clock::now();
  r->outcome.program = spec.argv.empty() ? "" : spec.argv.front();
  r->outcome.timeout = spec.timeout;
  return r;
}

// False (with the outcome saying why) when it did not start.
bool RealCommandRunner::Spawn(const RunningPtr& r, const CommandSpec& spec) {
  if (spec.timeout.count() <= 0) {
    r->outcome.error = "cannot start '" + r->outcome.program + "': it has no timeout (must be longer than 0)";
    return false;
  }
  SpawnSpec s;
  s.argv = spec.argv;
  s.workdir = spec.workdir;
  s.env = spec.env;
  s.pipe_output = s.merge_output = static_cast<bool>(spec.on_line);
  if (!spec.on_line) s.output_file = spec.output_file;
  s.null_stdin = spec.null_stdin;
  s.die_with_parent = spec.die_with_parent;
  s.want_pidfd = true;
  // The table calls from whichever thread reaped; the command is finished on ours.
  auto child = children_.Spawn(s, [mailbox = mailbox_, weak = std::weak_ptr<RunningCommand>(r)](int wait_status) {
    std::lock_guard lock(mailbox->mutex);
    if (!mailbox->io) return;
    asio::post(*mailbox->io, [weak, wait_status] {
      if (auto self = weak.lock(); self && self->owner) self->owner->Exited(self, wait_status);
    });
  });
  if (!child) {
    r->outcome.error = child.error().message;
    return false;
  }
  r->pid = child->pid;
  if (child->stdout_fd >= 0) {
    r->relay = std::make_unique<OutputRelay>(io_, child->stdout_fd, -1, spec.on_line, /*write_through=*/false);
  } else {
    r->output_done = true;
  }
  WatchExit(r, child->pidfd);
  return true;
}

void RealCommandRunner::WatchExit(const RunningPtr& r, int pidfd) {
  if (pidfd < 0) return ReapWithoutPidfd(r);
  r->exit_watch.assign(pidfd);
  r->exit_watch.async_wait(asio::posix::descriptor_base::wait_read, [r](const boost::system::error_code& ec) {
    if (!ec && r->owner) r->owner->children_.Reap();  // the status comes through the table's callback
  });
}

void RealCommandRunner::ReapWithoutPidfd(const RunningPtr& r) {
  r->reap.expires_after(kReapWithoutPidfd);
  r->reap.async_wait([r](const boost::system::error_code& ec) {
    if (ec || !r->owner || r->exited) return;
    r->owner->children_.Reap();
    r->owner->ReapWithoutPidfd(r);
  });
}

void RealCommandRunner::Kill(const RunningPtr& r, CommandEnd why) {
  if (r->exited || r->killed) return;
  r->killed = why;
  SignalGroup(r->pid, SIGKILL);
  r->deadline.expires_after(kAfterKill);
  r->deadline.async_wait([r](const boost::system::error_code& ec) {
    if (ec || !r->owner || r->exited) return;
    r->owner->children_.Unwatch(r->pid);  // a process stuck in the kernel: its status is reaped without a call
    r->owner->Exited(r, std::nullopt);
  });
}

// The main process's status (nullopt: it never came after our SIGKILL). Whatever is left
// of its group gets SIGKILL too: a command's processes do not outlive it.
void RealCommandRunner::Exited(const RunningPtr& r, std::optional<int> wait_status) {
  if (r->exited) return;
  r->exited = true;
  r->deadline.cancel();
  r->reap.cancel();
  auto& o = r->outcome;
  if (wait_status && WIFEXITED(*wait_status)) {
    o.end = CommandEnd::kExited;  // even after our SIGKILL: it finished on its own first
    o.exit_code = WEXITSTATUS(*wait_status);
  } else {
    o.end = r->killed.value_or(CommandEnd::kSignaled);
    o.signal = wait_status ? WTERMSIG(*wait_status) : 0;
  }
  r->group = children_.WatchGroup(io_, r->pid, kGroupWithin, [r](bool gone) {
    r->outcome.group_survived = !gone;
    r->group_done = true;
    if (r->owner) r->owner->Finish(r);
  });
  if (r->relay) {
    r->relay->Drain(kDrainAfterExit, [r] {
      r->output_done = true;
      if (r->owner) r->owner->Finish(r);
    });
  }
}

void RealCommandRunner::Finish(const RunningPtr& r) {
  if (r->finished || !r->exited || !r->group_done || !r->output_done) return;
  r->finished = true;
  r->outcome.duration = std::chrono::duration_cast<std::chrono::milliseconds>(steady_clock::now() - r->started);
  boost::system::error_code ignored;
  r->exit_watch.close(ignored);
  running_.erase(r->id);
  if (auto done = std::move(r->done)) done(r->outcome);  // may start another command
}

void RealCommandRunner::Cancel(Id id) {
  if (auto it = running_.find(id); it != running_.end() && it->second->pid > 0)
    Kill(it->second, CommandEnd::kCancelled);
}

void RealCommandRunner::CancelAll() {
  for (auto& [id, r] : running_) {
    if (r->pid > 0) Kill(r, CommandEnd::kCancelled);
  }
}

pid_t RealCommandRunner::pid(Id id) const {
  const auto it = running_.find(id);
  return it == running_.end() || it->second->exited ? 0 : it->second->pid;
}

}  // namespace

std::string CommandOutcome::Describe() const {
  std::string text;
  switch (end) {
    case CommandEnd::kExited:
      text = "exit code " + std::to_string(exit_code);
      break;
    case CommandEnd::kSignaled:
      text = "killed by " + SignalAbbrev(signal);
      break;
    case CommandEnd::kTimedOut:
      text = "timed out after " + FormatDuration(timeout) + " (SIGKILL to its process group)";
      break;
    case CommandEnd::kCancelled:
      text = "cancelled (SIGKILL to its process group)";
      break;
    case CommandEnd::kSpawnFailed:
      return error;
  }
  if (group_survived) text += "; part of its process group survived SIGKILL";
  return text;
}

std::unique_ptr<CommandRunner> MakeCommandRunner(boost::asio::io_context& io, ChildTable& children) {
  return std::make_unique<RealCommandRunner>(io, children);
}

}  // namespace spotvisor::process

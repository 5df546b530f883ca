// The driver's effects on the world behind one seam (leveldb's Env, ninja's CommandRunner):
// the clock (time, timers, the loop), the signals sent to spotvisor, starting the trainer and
// learning that it ended, signalling its processes, a previous supervisor's leftovers, the
// preemption watcher, and the job's files in the state dir. PosixHost (posix_host.hpp) is the
// real one; tests script a fake one and run the driver in-process, in virtual time. Every
// call and every callback happens on the driver's io thread.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <cstddef>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "spotvisor/config/job_config.hpp"
#include "spotvisor/preemption/watcher.hpp"
#include "spotvisor/process/process_group.hpp"
#include "spotvisor/process/spawn.hpp"
#include "spotvisor/state/journal.hpp"
#include "spotvisor/supervisor/fsm.hpp"
#include "spotvisor/util/clock.hpp"
#include "spotvisor/util/result.hpp"

namespace boost::asio {
class io_context;
}  // namespace boost::asio

namespace spotvisor::process {
class ChildTable;
}  // namespace spotvisor::process

namespace spotvisor::supervisor {

// One started trainer: its main process, which leads a process group of its own, and the
// launcher tree under it. Owned by the driver until the group is gone.
// A launcher's live workers, read from /proc: a worker that waits on the rendezvous store
// of a held launcher uses no CPU and sleeps in a socket read; one that saves, sleeps or
// waits on a peer in a collective (a futex: gloo's own threads do the network) does not.
struct WorkersActivity {
  std::uint64_t cpu_ticks = 0;       // CPU time they have used, in clock ticks
  bool all_in_socket_waits = false;  // every one's main thread sleeps in a socket or poll wait
};

class Trainer {
 public:
  virtual ~Trainer() = default;
  virtual pid_t pid() const = 0;  // the main process, also the group id
  // Who it is, so that a later supervisor can recognise a leftover (persisted).
  virtual process::ChildIdentity Identity() const = 0;
  // Sends `signo` to `to` (kGroup, kMain or kWorkers); how many processes it reached. With
  // `only_to_handlers`, processes of `to` that do not catch `signo` are skipped.
  virtual std::size_t Send(int signo, config::SignalTarget to, bool only_to_handlers) = 0;
  // How many processes of `to` catch `signo` now (SigCgt: a handler, not SIG_DFL or SIG_IGN).
  virtual std::size_t Catchers(int signo, config::SignalTarget to) const = 0;
  // SIGKILL to the whole group; how many processes were in it.
  virtual std::size_t KillGroup() = 0;
  // SIGSTOP to the launcher(s); `signo` then SIGCONT to those held. How many.
  virtual std::size_t HoldLaunchers() = 0;
  virtual std::size_t ReleaseLaunchers(int signo) = 0;
  // SIGSTOP (`on`) or SIGCONT to every process of the group and to a launcher's workers
  // outside it (FreezeTrainerAction), leaving the launchers HoldLaunchers paused as they are.
  // How many processes it reached.
  virtual std::size_t Pause(bool on) = 0;
  // True when the launcher has no live worker left.
  virtual bool WorkersGone() const = 0;
  // What its live workers are doing now (WorkersSampledEvent).
  virtual WorkersActivity Workers() const = 0;
  // CPU time the live processes of the whole group have used, in clock ticks.
  virtual std::uint64_t GroupCpuTicks() const = 0;
  // True when no process of the group is left (zombies reaped first).
  virtual bool GroupGone() = 0;
  // Until no process of the group is left, SIGKILL to whatever remains every few ms; then
  // `done(true)` on the loop, or `done(false)` once `within` has passed (something stuck in
  // the kernel). Not called back after Host::Detach.
  virtual void AwaitGroupGone(std::chrono::milliseconds within, std::function<void(bool gone)> done) = 0;
  // For the log: the pids the last Send reached ("123,124"), the workers it skipped, and
  // what each process was doing when KillGroup found it ("1234 python S futex_wait").
  virtual std::string LastPids() const = 0;
  virtual std::size_t LastSkipped() const = 0;
  virtual std::string KilledStates() const = 0;
  // Its output (Host::Spawn's `on_line`): relayed to EOF yet, or none was piped.
  virtual bool OutputDone() const = 0;
  // Relays its output until EOF, for `within` at most (a process that left the group may
  // hold the pipe open); `then` runs on the loop once it has ended, never inside this call.
  virtual void DrainOutput(std::chrono::milliseconds within, std::function<void()> then) = 0;
};

// How long a gone trainer's last output is relayed for (its pipes' other ends may live on in
// a process that left its group), before the exit is heard of, and at spotvisor's exit.
inline constexpr std::chrono::milliseconds kOutputDrain{2000};

// The job's files in telemetry.state_dir while the job lock is held (state/job_lock.hpp,
// state/journal.hpp): the journal, and the notice file the trainer may read.
class StateFiles {
 public:
  virtual ~StateFiles() = default;
  // What the previous supervisor left, as loaded or last saved.
  virtual const state::PersistedState& state() const = 0;
  virtual std::vector<state::AttemptRecord> ReadAttempts() const = 0;
  virtual Status Save(const state::PersistedState& state, Durability durability) = 0;
  // A record that cannot be written is kept and written before the next one or at Flush.
  virtual Status AppendAttempt(const state::AttemptRecord& record) = 0;
  virtual Status FlushAttempts() = 0;
  virtual std::size_t unwritten_attempts() const = 0;
  // Replaces the notice file (SPOTVISOR_NOTICE_FILE) atomically with `text`.
  virtual Status WriteNotice(const std::string& text) = 0;
  // Before each start: the checkpoint dir exists, the last attempt's notice file is gone.
  virtual void BeforeStart() = 0;
};

class Host {
 public:
  using ExitHandler = std::function<void(ExitStatus)>;
  using LineHandler = std::function<void(std::string_view line)>;
  virtual ~Host() = default;

  // Once, before anything else: the loop every callback runs on. The host becomes the
  // reaper of the trainer's orphans (child subreaper) where it can.
  virtual void Attach(boost::asio::io_context& io) = 0;
  // No callback after this (shutdown). A signal of WatchSignals's that arrives from now on
  // no longer reaches `on_signal`: one of HurryOn's hurries the exit (Hurried), whose last
  // waits then end; the others are ignored. Trainers' output is relayed for kOutputDrain more.
  virtual void Detach() = 0;
  // Before Detach: the signals that hurry the exit after it (signals.stop_on; not "checkpoint
  // now", which after the exit line asks for nothing).
  virtual void HurryOn(const std::vector<int>& signos) { (void)signos; }
  // After Detach: one of HurryOn's signals has arrived since (a second SIGTERM while the
  // mirror's last uploads finish). Any thread.
  virtual bool Hurried() const { return false; }
  // Where every other child of the run (hooks, mirror commands) is started and reaped;
  // from Attach on, for RunControl::children. Usable from any thread.
  virtual process::ChildTable& children() = 0;
  // Every time the run reads, every timer it sets, and the loop that runs them (the driver's
  // io_context runs in clock().Run); observers get the same clock through RunControl.
  virtual Clock& clock() = 0;
  // From Attach until Detach: `on_signal` for each of `signos` that reaches spotvisor.
  virtual void WatchSignals(const std::vector<int>& signos, std::function<void(int signo)> on_signal) = 0;
  // Takes the job lock and opens the journal, before Attach. Another supervisor's lock is an
  // Error naming it that sets *holder to its pid (-1 when unknown); *holder = 0 otherwise.
  virtual Result<std::unique_ptr<StateFiles>> OpenState(const config::JobConfig& job, pid_t* holder) = 0;
  // Starts the trainer in its own process group; `on_exit` gets the main process's status
  // once, when it exits (the rest of its group may live on: see Trainer::GroupGone). When
  // the spec pipes its output, `on_line` gets each line of it on the loop, until EOF (the
  // host relays it to spotvisor's own stdout and stderr meanwhile).
  virtual Result<std::unique_ptr<Trainer>> Spawn(const process::SpawnSpec& spec, ExitHandler on_exit,
                                                 LineHandler on_line) = 0;
  // Live processes of a group a previous supervisor started, if it is really that group.
  virtual std::vector<pid_t> Leftovers(const process::ChildIdentity& child) = 0;
  virtual bool SignalGroup(pid_t pgid, int signo) = 0;
  // The preemption watcher for the job's provider; nullptr for `none`.
  virtual Result<std::unique_ptr<preemption::Watcher>> MakeWatcher(boost::asio::io_context& io,
                                                                   const config::ProviderSection& provider) = 0;
};

}  // namespace spotvisor::supervisor

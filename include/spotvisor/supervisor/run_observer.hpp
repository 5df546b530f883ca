// The seam between the supervisor driver and everything that watches or nudges a run:
// metrics, sd_notify, the run report, cost and budget, hooks, periodic checkpoints, hang
// detection, the mirror. The driver calls observers on its io thread, in registration
// order; an observer acts back only through RunControl. Observers must never block the
// io thread (post long work to their own thread and come back with asio::post).
#pragma once

#include <sys/types.h>

#include <chrono>
#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <string_view>

#include "spotvisor/checkpoint/resume_selector.hpp"
#include "spotvisor/config/job_config.hpp"
#include "spotvisor/preemption/watcher.hpp"
#include "spotvisor/state/journal.hpp"
#include "spotvisor/supervisor/fsm.hpp"
#include "spotvisor/util/clock.hpp"

namespace boost::asio {
class io_context;
}  // namespace boost::asio

namespace spotvisor::process {
class ChildTable;
}  // namespace spotvisor::process

namespace spotvisor::supervisor {

// What an observer may ask of the run. Calls are handled like the matching outside
// events (a stop for the budget behaves like any stop: grace, SIGKILL, exit code 3).
class RunControl {
 public:
  virtual ~RunControl() = default;
  virtual boost::asio::io_context& io() = 0;
  // The run's clock (the host's): read time and set timers with it, never std::chrono's.
  virtual Clock& clock() = 0;
  virtual const config::JobConfig& job() const = 0;
  // reason: kHang (restart within the hang budget) or kBudget (exit 3) or kNotice.
  virtual void RequestStop(StopReason reason, const std::string& detail) = 0;
  // Sends signals.checkpoint to the trainer when one runs ("checkpoint now, keep going").
  virtual void RequestCheckpoint(const std::string& detail) = 0;
  // A new good checkpoint was judged while the trainer ran (the checkpoint watcher's news,
  // for the Fsm: a deferred stop waits for it). Default: nothing (a run without the Fsm).
  // `written_at`: its newest mtime.
  virtual void CheckpointLanded(const std::filesystem::path& path, std::uint64_t step,
                                std::chrono::system_clock::time_point written_at) {
    (void)path, (void)step, (void)written_at;
  }
  // Any thread: the watcher saw a checkpoint being written (CheckpointWritingEvent).
  virtual void CheckpointWriting(const std::filesystem::path& path) { (void)path; }
  // Any thread: the watcher is about to judge a new or changed checkpoint
  // (CheckpointArrivingEvent); its verdict follows as CheckpointLanded or CheckpointWriting.
  virtual void CheckpointArriving(const std::filesystem::path& path,
                                  std::optional<std::chrono::system_clock::time_point> written_at) {
    (void)path, (void)written_at;
  }
  // The current trainer's pid (= its process group), 0 when none runs.
  virtual pid_t child_pid() const = 0;
  // Where every child of the run is started and reaped (hooks, mirror commands); it
  // outlives the observers.
  virtual process::ChildTable& children() = 0;
  // After the exit line: a stop signal has arrived since, so what is still waited for
  // (the mirror's last uploads) ends now. Any thread.
  virtual bool ExitHurried() const { return false; }
  // The coordinator's MemberForSure: io thread.
  virtual bool MemberForSure() const { return true; }
};

class RunObserver {
 public:
  virtual ~RunObserver() = default;
  // Once, before the first start; keep `control` for later requests.
  virtual void OnStart(RunControl& control) { (void)control; }
  // On the selection worker thread (NOT the io thread), before every checkpoint selection
  // for a start; may block (e.g. restoring checkpoints from a mirror). Default: nothing.
  virtual void BeforeSelection() {}
  // A checkpoint was chosen (or none) and rejected ones listed, before a start.
  virtual void OnSelection(const checkpoint::Selection& selection) { (void)selection; }
  // The trainer started as the Fsm asked (`start`: attempt, resume point, group place).
  virtual void OnAttemptStarted(const SpawnAction& start, pid_t pid) { (void)start, (void)pid; }
  // The whole group is gone; `record` is what the journal got.
  virtual void OnAttemptEnded(const state::AttemptRecord& record) { (void)record; }
  // A signal of signals.stop_on reached spotvisor (the stop it asks for follows).
  virtual void OnStopSignal(int signo) { (void)signo; }
  // A preemption notice (or an early hint such as AWS rebalance) was received.
  virtual void OnNotice(const preemption::Notice& notice) { (void)notice; }
  // `signo` reached at least one process of `to` (kGroup, kMain or kWorkers).
  virtual void OnSignalSent(int signo, config::SignalTarget to) { (void)signo, (void)to; }
  // A line the trainer wrote (without '\n'); only when health.progress_pattern is set,
  // which makes spotvisor relay the trainer's stdout/stderr.
  virtual void OnTrainerLine(std::string_view line) { (void)line; }
  virtual void OnPhase(Phase phase) { (void)phase; }
  // Last call: the exit code of `spotvisor run` and its one-line reason.
  virtual void OnExit(int code, const std::string& message) { (void)code, (void)message; }
};

}  // namespace spotvisor::supervisor

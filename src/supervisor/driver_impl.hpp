// Private to src/supervisor/: the driver's state and its parts, defined in three files a
// reader can find by what they do — driver.cpp (start-up, dispatch, journal, shutdown),
// driver_trainer.cpp (the trainer's start, signals and end), driver_notices.cpp
// (preemption notices, the drained validation, checkpoint selection). io thread only,
// but for the selection, which runs on `selections_` (selection_worker.hpp) and posts its answer back.
#pragma once

#include <boost/asio/io_context.hpp>
#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "selection_worker.hpp"
#include "spotvisor/state/journal.hpp"
#include "spotvisor/supervisor/coordinator.hpp"
#include "spotvisor/supervisor/driver.hpp"
#include "spotvisor/supervisor/fsm.hpp"
#include "spotvisor/supervisor/host.hpp"
#include "spotvisor/util/clock.hpp"
#include "spotvisor/util/result.hpp"

namespace spotvisor::supervisor {

class Driver::Impl final : public RunControl {
 public:
  Impl(const config::JobConfig& job, std::unique_ptr<checkpoint::ResumeSelector> selector, std::unique_ptr<Host> host);

  int Run();
  void AddObserver(std::unique_ptr<RunObserver> observer) { observers_.push_back(std::move(observer)); }
  void SetCoordinator(std::unique_ptr<Coordinator> coordinator) { coordinator_ = std::move(coordinator); }
  void SetSlurmRestartCount(std::optional<int> count) { slurm_restart_count_ = count; }
  // The host's wall clock in Unix milliseconds (the journal's unit).
  std::int64_t WallMillis() const { return UnixMillis(host_->clock().WallNow()); }

  // ---- RunControl ----
  boost::asio::io_context& io() override { return io_; }
  Clock& clock() override { return host_->clock(); }
  const config::JobConfig& job() const override { return job_; }
  pid_t child_pid() const override { return trainer_ ? trainer_->pid() : 0; }
  process::ChildTable& children() override { return host_->children(); }
  bool ExitHurried() const override { return host_->Hurried(); }
  void RequestStop(StopReason reason, const std::string& detail) override;
  void RequestCheckpoint(const std::string& detail) override;
  void CheckpointLanded(const std::filesystem::path& path, std::uint64_t step,
                        std::chrono::system_clock::time_point written_at) override;
  void CheckpointWriting(const std::filesystem::path& path) override;
  void CheckpointArriving(const std::filesystem::path& path,
                          std::optional<std::chrono::system_clock::time_point> written_at) override;

 private:
  // driver.cpp
  bool StopLeftovers();
  void OnSignal(int signo);
  bool StopsOn(int signo) const;  // signo is in signals.stop_on
  // "Checkpoint now", with whether any process of signals.target catches the signal.
  CheckpointRequestedEvent CheckpointRequest(const std::string& detail) const;
  HandlersSampledEvent Handlers() const;
  void Perform(const SampleHandlersAction&);  // HandlersSampledEvent, next on the loop
  GroupGrowingEvent GroupGrowing(const std::string& detail) const;
  void Dispatch(const Event& event);
  void Perform(const ArmTimerAction& a);
  void Perform(const CancelTimerAction& a);
  void Perform(const AttemptEndedAction& a);
  void Perform(const LogAction& a);
  void Perform(const ExitAction& a);
  void Shutdown(int code, const std::string& message);
  void SaveState(bool force = false);
  void JournalTrouble(const std::string& message);

  // driver_trainer.cpp
  void Perform(const SpawnAction& a);
  void Perform(const SignalAction& a);
  void Perform(const FreezeTrainerAction&);
  void Perform(const ThawTrainerAction&);
  void Perform(const HoldLaunchersAction&);
  void Perform(const ReleaseLaunchersAction& a);
  void Perform(const WatchWorkersAction&);
  void PollWorkers();
  // The coordinator says this node is cut off: the trainer's CPU for kCutOffSample, then
  // GroupCutOffEvent (the Fsm decides).
  void SampleCutOffTrainer();  // WatchWorkersAction's poll, every kWorkersPoll while the trainer stops
  void Perform(const KillGroupAction&);
  void OnTrainerExited(ExitStatus status);
  void TrainerGone();

  // driver_notices.cpp
  void Perform(const SelectResumeAction&);
  void OnSelected(Result<checkpoint::Selection> selection);
  void Perform(const ProposeResumeAction& a);
  void Perform(const PublishStopAction& a);
  void Perform(const PublishDoneAction& a);
  void Perform(const ValidateDrainedAction&);
  void Perform(const AcknowledgeNoticeAction&);
  void Perform(const ReleaseRankAction&);
  void OnNotice(const preemption::Notice& n);
  void OnNoticeCleared();
  void WriteNoticeFile(const preemption::Notice& n);

  const config::JobConfig& job_;                          // not owned
  boost::asio::io_context io_;                            // the one event loop; outlives the host
  std::shared_ptr<checkpoint::ResumeSelector> selector_;  // used by selections_ only
  std::unique_ptr<Host> host_;                            // every effect on the world
  std::map<TimerKind, std::unique_ptr<Timer>> timers_;    // armed by the Fsm
  std::unique_ptr<Timer> workers_poll_;                   // waiting for a launcher's workers to stop
  std::unique_ptr<Timer> cut_off_sample_;                 // the trainer's CPU, sampled once cut off
  std::unique_ptr<preemption::Watcher> watcher_;          // null for provider none
  std::unique_ptr<Coordinator> coordinator_;              // agrees on each start, hears the group's stops
  std::optional<preemption::Notice> notice_;              // the stop notice being handled
  std::vector<std::shared_ptr<RunObserver>> observers_;   // see run_observer.hpp (shared with selections)
  std::unique_ptr<StateFiles> files_;                     // the lock held, the journal: the job's memory
  std::optional<Fsm> fsm_;                                // the policy
  state::PersistedState persisted_;                       // driver-owned parts of the state
  state::AttemptRecord current_;                          // the attempt in progress
  std::optional<int> slurm_restart_count_;                // recorded with every attempt
  std::unique_ptr<Trainer> trainer_;                      // the running trainer's group, if any
  TimePoint trainer_started_{};                           // for uptime
  std::optional<ExitStatus> main_status_;                 // main process gone, group maybe not
  bool journal_trouble_ = false;                          // state dir not writable
  bool finished_ = false;                                 // Exit performed
  int exit_code_ = Code(ExitCode::kFailed);               // what Run returns
  SelectionWorker selections_{io_, host_->clock()};       // last: abandoned first, before io_ goes
};

}  // namespace spotvisor::supervisor

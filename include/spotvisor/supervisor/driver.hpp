// The thin Asio glue around the Fsm: it owns the io_context, the signal_set of requests
// (SIGINT, SIGTERM, SIGHUP, SIGUSR1), the timers, the job lock and the journal, turns what
// happens into Fsm events and carries out the Fsm's actions through a Host (host.hpp: the
// clock, the trainer's processes, the watcher). One thread runs everything; checkpoint
// selection runs on one worker thread and posts its answer back.
#pragma once

#include <functional>
#include <memory>
#include <optional>

#include "spotvisor/checkpoint/resume_selector.hpp"
#include "spotvisor/config/job_config.hpp"
#include "spotvisor/supervisor/coordinator.hpp"
#include "spotvisor/supervisor/host.hpp"
#include "spotvisor/supervisor/run_observer.hpp"

namespace boost::asio {
class io_context;
}  // namespace boost::asio

namespace spotvisor::supervisor {

class Driver {
 public:
  // `job` must be finalized and outlive the Driver. A null selector means the catalog's.
  // `host` carries out what touches the machine: the real one (posix_host.hpp) for a run,
  // a fake in the tests.
  Driver(const config::JobConfig& job, std::unique_ptr<checkpoint::ResumeSelector> selector,
         std::unique_ptr<Host> host);
  ~Driver();
  Driver(const Driver&) = delete;
  Driver& operator=(const Driver&) = delete;

  // Observers see the run and may nudge it (see run_observer.hpp); add before Run().
  void AddObserver(std::unique_ptr<RunObserver> observer);

  // The group this node starts and stops with (coordinator.hpp), made on the Driver's
  // io_context and the host's clock; without it a single node's LocalCoordinator. Before
  // Run(); its error is the factory's.
  using CoordinatorFactory = std::function<Result<std::unique_ptr<Coordinator>>(boost::asio::io_context&, Clock&)>;
  Status UseCoordinator(const CoordinatorFactory& make);

  // A SLURM job's SLURM_RESTART_COUNT (platform/slurm.hpp), recorded with every attempt;
  // nullopt outside SLURM (the default). Before Run().
  void RecordSlurmRestartCount(std::optional<int> count);

  // Supervises the job until it ends; returns the exit code of `spotvisor run`.
  int Run();

 private:
  class Impl;
  std::unique_ptr<Impl> impl_;  // keeps Asio out of this header
};

}  // namespace spotvisor::supervisor

// `spotvisor run`: read the job (file and/or flags), print it or supervise it. Flags
// override the file; relative paths in flags start at the current directory.
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <optional>

#include "commands.hpp"
#include "job_options.hpp"
#include "run_observers.hpp"
#include "spotvisor/cli/app.hpp"
#include "spotvisor/config/loader.hpp"
#include "spotvisor/coordination/etcd_coordinator.hpp"
#include "spotvisor/log/log.hpp"
#include "spotvisor/platform/slurm.hpp"
#include "spotvisor/report/termination_message.hpp"
#include "spotvisor/supervisor/driver.hpp"
#include "spotvisor/supervisor/posix_host.hpp"

namespace spotvisor::cli {
namespace {

struct RunOptions {
  JobOptions job;             // --config and the overrides
  bool print_config = false;  // print the effective config and exit
};

}  // namespace

void AddRunCommand(CLI::App& app, int& exit_code) {
  auto options = std::make_shared<RunOptions>();
  CLI::App* run = app.add_subcommand("run", "Supervise a training job: spawn, forward notices, restart, resume");
  run->footer(
      "Examples:\n"
      "  spotvisor run --config job.yaml\n"
      "  spotvisor run --checkpoint-dir ./ckpt --pattern 'ckpt_step{step}' \\\n"
      "      --resume-arg='--resume_from={checkpoint}' -- /usr/bin/python3 train.py --ckpt-dir ./ckpt\n"
      "Exit codes: 0 done, 1 failed permanently, 3 cost budget exhausted, 64 usage,\n"
      "  73 already running, 75 stopped (notice or a signals.stop_on signal; resumable; job.stop_exit_code\n"
      "  changes it: 143 or 200 for Kubernetes/Kubeflow, never 137), 78 configuration error.");
  AddJobOptions(*run, options->job, /*with_command=*/true);
  run->add_flag("--print-config", options->print_config,
                "Print the effective configuration (secrets redacted) and exit");
  run->callback([options, &exit_code] {
    auto job = LoadJobOrExit(options->job, /*require_command=*/true, exit_code);
    if (!job) return;
    if (options->print_config) {
      std::fputs(config::ToYaml(*job).c_str(), stdout);
      exit_code = exit_code::kDone;
      return;
    }
    log::ConfigureLogging(job->telemetry.log_format, job->telemetry.log_level, job->job.name);
    auto parts = AssembleRun(*job);
    if (!parts) {
      exit_code = ConfigError(parts.error().message);
      return;
    }
    supervisor::Driver driver(*job, std::move(parts->selector), supervisor::MakePosixHost());
    if (job->coordination.enabled()) {
      const Status group = driver.UseCoordinator([&job](boost::asio::io_context& io, Clock& clock) {
        return coordination::MakeEtcdCoordinator(io, clock, *job);
      });
      if (!group) {
        exit_code = ConfigError(group.error().message);
        return;
      }
    }
    if (const auto slurm = platform::CurrentSlurmJob())
      driver.RecordSlurmRestartCount(slurm->restart_count.value_or(0));
    for (auto& observer : parts->observers) driver.AddObserver(std::move(observer));
    // After the telemetry observers (run.json is saved first); scontrol requeue comes last.
    if (auto t = report::MakeTerminationLogObserver(*job)) driver.AddObserver(std::move(t));
    if (auto s = platform::MakeSlurmObserver(*job)) driver.AddObserver(std::move(s));
    exit_code = driver.Run();
  });
}

}  // namespace spotvisor::cli

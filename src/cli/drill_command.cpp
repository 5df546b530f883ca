// `spotvisor drill --config job.yaml [--interruptions N] [--kind notice|sigterm|kill]`:
// proves exact resume on the user's own job (see include/spotvisor/drill/drill.hpp).
#include <cstdio>
#include <filesystem>

#include "commands.hpp"
#include "job_options.hpp"
#include "spotvisor/cli/app.hpp"
#include "spotvisor/drill/drill.hpp"
#include "spotvisor/log/log.hpp"

namespace spotvisor::cli {
namespace {

struct DrillFlags {
  JobOptions job;
  int interruptions = 2;
  std::string kind = "notice";
  std::uint64_t seed = 0;
  std::string scratch;
  bool keep_scratch = false;
};

}  // namespace

void AddDrillCommand(CLI::App& app, int& exit_code) {
  auto flags = std::make_shared<DrillFlags>();
  CLI::App* cmd =
      app.add_subcommand("drill", "Run the job uninterrupted and with injected interruptions; prove exact resume");
  cmd->footer("Exit: 0 identical, 1 differ or inconclusive (or a run failed), 64 usage, 78 configuration error.");
  cmd->add_option("-c,--config", flags->job.config_file, "The job file (YAML)")->required();
  cmd->add_option("--interruptions", flags->interruptions, "How many interruptions to inject")
      ->check(CLI::Range(1, 100));
  cmd->add_option("--kind", flags->kind, "notice (mock metadata server) | sigterm (to spotvisor) | kill (the trainer)")
      ->check(CLI::IsMember({"notice", "sigterm", "kill"}));
  cmd->add_option("--seed", flags->seed, "Random seed of the interruption moments (printed; 0 = from the clock)");
  cmd->add_option("--scratch", flags->scratch, "Scratch dir (default: a new one under $TMPDIR)");
  cmd->add_flag("--keep-scratch", flags->keep_scratch, "Keep the scratch dir even when the results are identical");
  cmd->callback([flags, &exit_code] {
    auto job = LoadJobOrExit(flags->job, /*require_command=*/true, exit_code);
    if (!job) return;
    if (!job->checkpoints.dir) {
      exit_code = ConfigError(flags->job.config_file + ": checkpoints.dir: a drill needs the job's checkpoints");
      return;
    }
    // The drill narrates on stdout; only trouble from in-process parts (the mock) is logged.
    log::ConfigureLogging(config::LogFormat::kText, "warning", job->job.name);
    drill::DrillOptions o;
    o.spotvisor = std::filesystem::read_symlink("/proc/self/exe");
    o.run_args = {"--config", std::filesystem::absolute(flags->job.config_file).string()};
    o.interruptions = flags->interruptions;
    o.kind = flags->kind == "kill"      ? drill::InterruptionKind::kKill
             : flags->kind == "sigterm" ? drill::InterruptionKind::kSigterm
                                        : drill::InterruptionKind::kNotice;
    o.seed = flags->seed;
    if (!flags->scratch.empty()) o.scratch = std::filesystem::absolute(flags->scratch);
    o.keep_scratch = flags->keep_scratch;
    o.has_result_file = job->job.result_file.has_value();
    o.stop_exit_code = job->job.stop_exit_code;
    o.pattern = job->checkpoints.pattern;
    auto report = drill::RunDrill(o);
    if (!report) {
      std::fprintf(stderr, "spotvisor: drill failed: %s\n", report.error().message.c_str());
      exit_code = exit_code::kFailed;
      return;
    }
    std::fputs(drill::FormatReport(*report).c_str(), stdout);
    exit_code = report->identical && report->conclusive() ? exit_code::kDone : exit_code::kFailed;
  });
}

}  // namespace spotvisor::cli

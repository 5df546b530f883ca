// `spotvisor report`: the run report (Markdown, or JSON with --json) from a job's state
// dir, built from the journal and run.json alone; with --baseline, two runs side by side.
// Reads only.
#include <cstdio>
#include <memory>
#include <nlohmann/json.hpp>

#include "commands.hpp"
#include "job_options.hpp"
#include "spotvisor/cli/app.hpp"
#include "spotvisor/state/journal.hpp"
#include "spotvisor/telemetry/report.hpp"
#include "spotvisor/util/clock.hpp"

namespace spotvisor::cli {
namespace {

struct ReportOptions {
  JobOptions job;         // --config (state dir from the job file)
  std::string state_dir;  // positional
  std::string baseline;   // --baseline OTHER_STATE_DIR
  bool json = false;      // --json
};

}  // namespace

void AddReportCommand(CLI::App& app, int& exit_code) {
  auto o = std::make_shared<ReportOptions>();
  CLI::App* cmd = app.add_subcommand("report", "Print the run report (Markdown or JSON) from a job's state dir");
  cmd->footer(
      "Examples:\n  spotvisor report /var/lib/spotvisor/llama-ft\n  spotvisor report --config job.yaml --json\n"
      "  spotvisor report STATE_DIR --baseline BASELINE_STATE_DIR\n"
      "Exit codes: 0 printed, 1 no run recorded there or a file is unreadable, 64 usage, 78 configuration error.");
  cmd->add_option("STATE_DIR", o->state_dir, "the job's telemetry.state_dir");
  cmd->add_option("--baseline", o->baseline, "a second run's state dir to compare with");
  cmd->add_flag("--json", o->json, "JSON for tools instead of Markdown");
  AddJobOptions(*cmd, o->job, /*with_command=*/false);
  cmd->callback([o, &exit_code] {
    std::filesystem::path dir = o->state_dir;
    if (dir.empty()) {
      if (o->job.config_file.empty() && !o->job.state_dir) {
        std::fprintf(stderr, "spotvisor: report needs STATE_DIR or --config FILE\n");
        exit_code = exit_code::kUsage;
        return;
      }
      auto job = LoadJobOrExit(o->job, /*require_command=*/false, exit_code);
      if (!job) return;
      dir = job->telemetry.state_dir;
    }
    const auto now = UnixMillis(SystemClock().WallNow());
    auto report = telemetry::BuildReport(dir, now);
    if (!report) {
      std::fprintf(stderr, "spotvisor: %s\n", report.error().message.c_str());
      exit_code = exit_code::kFailed;
      return;
    }
    if (o->baseline.empty()) {
      const std::string text = o->json ? report->dump(2) + "\n" : telemetry::RenderMarkdown(*report);
      std::fputs(text.c_str(), stdout);
      exit_code = exit_code::kDone;
      return;
    }
    auto baseline = telemetry::BuildReport(o->baseline, now);
    if (!baseline) {
      std::fprintf(stderr, "spotvisor: baseline: %s\n", baseline.error().message.c_str());
      exit_code = exit_code::kFailed;
      return;
    }
    const auto comparison = telemetry::CompareReports(*report, *baseline);
    const std::string text = o->json ? comparison.dump(2) + "\n" : telemetry::RenderComparison(comparison);
    std::fputs(text.c_str(), stdout);
    exit_code = exit_code::kDone;
  });
}

}  // namespace spotvisor::cli

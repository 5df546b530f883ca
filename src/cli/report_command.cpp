// `spotvisor report`: the run report (Markdown, JSON with --json, or a self-contained HTML
// page with --html FILE) from a job's state dir, built from the journal and run.json alone;
// with --baseline, two runs side by side. Reads the state dir only; --html writes FILE.
#include <cstdio>
#include <memory>
#include <nlohmann/json.hpp>
#include <vector>

#include "commands.hpp"
#include "job_options.hpp"
#include "spotvisor/cli/app.hpp"
#include "spotvisor/report/report.hpp"
#include "spotvisor/state/journal.hpp"
#include "spotvisor/util/atomic_file.hpp"
#include "spotvisor/util/clock.hpp"

namespace spotvisor::cli {
namespace {

struct ReportOptions {
  JobOptions job;                  // --config (state dir from the job file)
  std::string state_dir;           // positional
  std::string baseline;            // --baseline OTHER_STATE_DIR
  bool json = false;               // --json
  std::string html;                // --html FILE
  std::vector<std::string> nodes;  // --node OTHER_NODE_STATE_DIR (with --html)
};

// Writes the page to `path`; false (with the reason on stderr, naming the file) when it
// cannot be written.
bool WriteHtml(const std::string& path, const std::string& page, int& exit_code) {
  if (Status s = WriteFileAtomically(path, page, Durability::kAtomicOnly); !s) {
    std::fprintf(stderr, "spotvisor: HTML report: %s\n", s.error().message.c_str());
    exit_code = exit_code::kFailed;
    return false;
  }
  std::fprintf(stderr, "spotvisor: HTML report written to %s\n", path.c_str());
  exit_code = exit_code::kDone;
  return true;
}

// --node: one HTML page with every node of a multi-node job on one time axis.
void WriteGroupPage(const ReportOptions& o, const nlohmann::json& first, std::int64_t now, int& exit_code) {
  if (o.html.empty()) {
    std::fprintf(stderr, "spotvisor: report --node needs --html FILE (one page for the whole group)\n");
    exit_code = exit_code::kUsage;
    return;
  }
  std::vector<nlohmann::json> nodes{first};
  for (const auto& node_dir : o.nodes) {
    auto node = report::BuildReport(node_dir, now);
    if (!node) {
      std::fprintf(stderr, "spotvisor: --node %s: %s\n", node_dir.c_str(), node.error().message.c_str());
      exit_code = exit_code::kFailed;
      return;
    }
    nodes.push_back(std::move(*node));
  }
  WriteHtml(o.html, report::RenderGroupHtml(nodes), exit_code);
}

// The report of o's state dir: printed, written as HTML, or compared with a baseline's.
void RunReport(const ReportOptions& o, int& exit_code) {
  std::filesystem::path dir = o.state_dir;
  if (dir.empty()) {
    if (o.job.config_file.empty() && !o.job.state_dir) {
      std::fprintf(stderr, "spotvisor: report needs STATE_DIR or --config FILE\n");
      exit_code = exit_code::kUsage;
      return;
    }
    auto job = LoadJobOrExit(o.job, /*require_command=*/false, exit_code);
    if (!job) return;
    dir = job->telemetry.state_dir;
  }
  const auto now = UnixMillis(SystemClock().WallNow());
  auto run = report::BuildReport(dir, now);
  if (!run) {
    std::fprintf(stderr, "spotvisor: %s\n", run.error().message.c_str());
    exit_code = exit_code::kFailed;
    return;
  }
  if (!o.nodes.empty()) {
    WriteGroupPage(o, *run, now, exit_code);
    return;
  }
  if (o.baseline.empty()) {
    if (!o.html.empty()) {
      WriteHtml(o.html, report::RenderHtml(*run), exit_code);
      return;
    }
    const std::string text = o.json ? run->dump(2) + "\n" : report::RenderMarkdown(*run);
    std::fputs(text.c_str(), stdout);
    exit_code = exit_code::kDone;
    return;
  }
  auto baseline = report::BuildReport(o.baseline, now);
  if (!baseline) {
    std::fprintf(stderr, "spotvisor: baseline: %s\n", baseline.error().message.c_str());
    exit_code = exit_code::kFailed;
    return;
  }
  if (!o.html.empty()) {
    WriteHtml(o.html, report::RenderHtml(*run, &*baseline), exit_code);
    return;
  }
  const auto comparison = report::CompareReports(*run, *baseline);
  const std::string text = o.json ? comparison.dump(2) + "\n" : report::RenderComparison(comparison);
  std::fputs(text.c_str(), stdout);
  exit_code = exit_code::kDone;
}

}  // namespace

void AddReportCommand(CLI::App& app, int& exit_code) {
  auto o = std::make_shared<ReportOptions>();
  CLI::App* cmd = app.add_subcommand(
      "report", "Print the run report (Markdown or JSON) or write it as HTML, from a job's state dir");
  cmd->footer(
      "Examples:\n  spotvisor report /var/lib/spotvisor/llama-ft\n  spotvisor report --config job.yaml --json\n"
      "  spotvisor report STATE_DIR --baseline BASELINE_STATE_DIR\n"
      "  spotvisor report STATE_DIR --html report.html [--baseline BASELINE_STATE_DIR]\n"
      "  spotvisor report NODE0_STATE_DIR --html group.html --node NODE1_STATE_DIR --node NODE2_STATE_DIR\n"
      "Exit codes: 0 printed or written, 1 no run recorded there, a file is unreadable or the HTML file cannot be "
      "written, 64 usage, 78 configuration error.");
  cmd->add_option("STATE_DIR", o->state_dir, "the job's telemetry.state_dir");
  cmd->add_option("--baseline", o->baseline, "a second run's state dir to compare with");
  cmd->add_flag("--json", o->json, "JSON for tools instead of Markdown");
  cmd->add_option("--html", o->html,
                  "write one self-contained HTML page (timeline, goodput, tables; no script, opens offline) to FILE")
      ->excludes("--json");
  cmd->add_option("--node", o->nodes,
                  "with --html: another node's state dir of the same multi-node job (repeat it); one page, every "
                  "node on one time axis")
      ->excludes("--json")
      ->excludes("--baseline");
  AddJobOptions(*cmd, o->job, /*with_command=*/false);
  cmd->callback([o, &exit_code] { RunReport(*o, exit_code); });
}

}  // namespace spotvisor::cli

// The run report: everything a person (Markdown) or a tool (JSON) needs to know about a
// run afterwards, built from the state dir alone (journal + run.json, which telemetry's
// observer keeps), so it can be made at the end of a run and again later by `spotvisor
// report`. Blocking file reads; any thread.
#pragma once

#include <cstdint>
#include <filesystem>
#include <nlohmann/json_fwd.hpp>
#include <optional>
#include <string>
#include <vector>

#include "spotvisor/util/result.hpp"

namespace spotvisor::config {
struct JobConfig;
}

namespace spotvisor::state {
struct AttemptRecord;
}

namespace spotvisor::telemetry {
struct RunLedger;
}

namespace spotvisor::report {

// The report as JSON. An Error when the dir holds no run (no run.json and no attempts) or
// a file in it is corrupt; the message names the file.
Result<nlohmann::json> BuildReport(const std::filesystem::path& state_dir, std::int64_t now_ms);

std::string RenderMarkdown(const nlohmann::json& report);

// The report's `timeline` (unix ms): sessions, attempts, the gaps between them (stopping,
// backoff, waiting), notices, checkpoints with their verdicts, the step reached over time.
nlohmann::json BuildTimeline(const telemetry::RunLedger& ledger, const std::vector<state::AttemptRecord>& attempts,
                             std::int64_t now_ms);

// One self-contained HTML page (inline SVG and CSS, no script, a Content-Security-Policy
// that forbids every load): the timeline, the goodput buckets, the report's tables. With a
// baseline, the comparison and the two runs side by side.
std::string RenderHtml(const nlohmann::json& report, const nlohmann::json* baseline = nullptr);
// The nodes of one multi-node job (each node's report, from its own state dir) on one page,
// one after the other, their timelines on one time axis.
std::string RenderGroupHtml(const std::vector<nlohmann::json>& nodes);

// Two runs side by side: throughput, goodput, cost per 1000 steps, steps lost, ...
nlohmann::json CompareReports(const nlohmann::json& run, const nlohmann::json& baseline);
std::string RenderComparison(const nlohmann::json& comparison);

// Writes <base>.md and <base>.json atomically; `path` is telemetry.report_path or, unset,
// <state_dir>/report.md. Returns the Markdown path.
Result<std::filesystem::path> WriteReport(const nlohmann::json& report, const std::filesystem::path& state_dir,
                                          const std::optional<std::filesystem::path>& path);

// The report at a run's end (telemetry's ReportWriter, passed in by `spotvisor run`): built
// from telemetry.state_dir as at `now_ms` (the run's clock) and written where
// telemetry.report_path says; logs event=report_written, or event=report_failed and returns
// nullopt. Returns the Markdown path.
std::optional<std::filesystem::path> WriteRunReport(const config::JobConfig& job, std::int64_t now_ms);

}  // namespace spotvisor::report

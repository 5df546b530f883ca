// `spotvisor checkpoints`: the job's checkpoints as a table (or JSON) with path, step,
// size, age, verdict and reason; for a fixed name (ckpt.pt), the file in place and then
// the versions spotvisor keeps of it, each with its generation as the step; a fenced one (written by an epoch the group
// had left, per the state dir's attempts: fence.hpp) says so and why. Reads only; `--update-cache` may write the
// verdict cache in the job's state dir, never anything in the checkpoints dir. With a mirror,
// a DURABLE column says what `<state_dir>/durability.json` knows of each: on the mirror
// (durable), uploading, failed (why), superseded, or "-" (only on this machine).
#include <chrono>
#include <cstdio>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "commands.hpp"
#include "job_options.hpp"
#include "spotvisor/checkpoint/catalog.hpp"
#include "spotvisor/cli/app.hpp"
#include "spotvisor/mirror/durability_ledger.hpp"
#include "spotvisor/util/clock.hpp"
#include "spotvisor/util/units.hpp"

namespace spotvisor::cli {
namespace {

struct CheckpointsOptions {
  JobOptions job;             // --config, --dir/--checkpoint-dir, --pattern, --validate, ...
  bool json = false;          // --json
  bool update_cache = false;  // --update-cache
};

std::string Age(std::int64_t mtime_ns) {
  const auto now = UnixMillis(SystemClock().WallNow()) / 1000;
  const std::int64_t s = std::max<std::int64_t>(0, now - mtime_ns / 1'000'000'000);
  if (s < 120) return std::to_string(s) + "s";
  if (s < 7200) return std::to_string(s / 60) + "m";
  if (s < 172800) return std::to_string(s / 3600) + "h";
  return std::to_string(s / 86400) + "d";
}

// Why each entry is fenced, in the same order; none: not fenced.
using Fenced = std::vector<std::optional<std::string>>;

// The DURABLE cell: what the mirror did with this checkpoint (the same name and step).
std::string DurableCell(const checkpoint::CatalogEntry& e, const mirror::DurabilityRecords& durable) {
  const auto it = durable.find(e.name);
  if (it == durable.end() || it->second.step != e.step) return "-";
  const auto& r = it->second;
  if (r.state == mirror::Durability::kFailed) return std::string("failed: ") + r.detail;
  return mirror::ToString(r.state);
}

void PrintTable(const std::vector<checkpoint::CatalogEntry>& entries, const Fenced& fenced,
                const std::optional<mirror::DurabilityRecords>& durable) {
  std::vector<std::string> head = {"PATH", "STEP", "SIZE", "AGE", "VERDICT"};
  if (durable) head.push_back("DURABLE");
  head.push_back("REASON");
  std::vector<std::vector<std::string>> rows = {head};
  for (std::size_t i = 0; i < entries.size(); ++i) {
    const auto& e = entries[i];
    const std::string verdict = fenced[i] ? "FENCED" : e.verdict->good ? "good" : "BAD";
    const std::string reason = e.verdict->reason + (e.from_cache ? " (cached)" : "");
    std::vector<std::string> row = {e.path.string(), std::to_string(e.step), FormatSize(e.key.size),
                                    Age(e.key.mtime_ns), verdict};
    if (durable) row.push_back(DurableCell(e, *durable));
    row.push_back(fenced[i] ? *fenced[i] + (e.verdict->good ? "" : "; also bad: " + reason) : reason);
    rows.push_back(std::move(row));
  }
  std::vector<std::size_t> width(rows[0].size(), 0);
  for (const auto& r : rows) {
    for (std::size_t c = 0; c + 1 < r.size(); ++c) width[c] = std::max(width[c], r[c].size());
  }
  for (const auto& r : rows) {
    std::string line;
    for (std::size_t c = 0; c < r.size(); ++c) {
      line += r[c];
      if (c + 1 < r.size()) line += std::string(width[c] - r[c].size() + 2, ' ');
    }
    std::puts(line.c_str());
  }
}

void PrintJson(const std::vector<checkpoint::CatalogEntry>& entries, const Fenced& fenced,
               const std::optional<mirror::DurabilityRecords>& durable) {
  nlohmann::json out = nlohmann::json::array();
  for (std::size_t i = 0; i < entries.size(); ++i) {
    const auto& e = entries[i];
    out.push_back({{"path", e.path.string()},
                   {"name", e.name},
                   {"step", e.step},
                   {"size", e.key.size},
                   {"mtime_ns", e.key.mtime_ns},
                   {"directory", e.is_directory},
                   {"good", e.verdict->good},
                   {"format", e.verdict->format},
                   {"reason", e.verdict->reason},
                   {"cached", e.from_cache},
                   {"kept_version", e.name.rfind(versions::kVersionsDir, 0) == 0},
                   {"fenced", fenced[i] ? nlohmann::json(*fenced[i]) : nlohmann::json(nullptr)},
                   {"durable", durable ? nlohmann::json(DurableCell(e, *durable)) : nlohmann::json(nullptr)}});
  }
  std::puts(out.dump(2).c_str());
}

}  // namespace

void AddCheckpointsCommand(CLI::App& app, int& exit_code) {
  auto o = std::make_shared<CheckpointsOptions>();
  CLI::App* cmd = app.add_subcommand("checkpoints", "List a job's checkpoints with their verdicts (changes nothing)");
  cmd->footer(
      "Examples:\n  spotvisor checkpoints --config job.yaml\n"
      "  spotvisor checkpoints --dir ./ckpt --pattern 'ckpt_step{step}' --json\n"
      "A fixed name (--pattern ckpt.pt) lists the file in place, then the versions spotvisor keeps of it in\n"
      ".spotvisor-versions/ (STEP: the version's generation, 1 for the job's first).\n"
      "Exit codes: 0 every checkpoint is good, 1 none found or some are bad or fenced, 64 usage, 78 configuration "
      "error.");
  AddJobOptions(*cmd, o->job, /*with_command=*/false);
  cmd->add_option("--dir", o->job.checkpoint_dir, "checkpoints.dir (same as --checkpoint-dir)");
  cmd->add_flag("--json", o->json, "Print JSON instead of a table");
  cmd->add_flag("--update-cache", o->update_cache,
                "Remember the verdicts in the job's state dir (checkpoint-cache.tsv); checkpoints are never touched");
  cmd->callback([o, &exit_code] {
    auto job = LoadJobOrExit(o->job, /*require_command=*/false, exit_code);
    if (!job) return;
    auto catalog = checkpoint::Catalog::FromConfig(*job);
    if (!catalog) {
      exit_code = ConfigError(catalog.error().message);
      return;
    }
    auto entries = catalog->Scan();
    if (!entries) {
      std::fprintf(stderr, "spotvisor: %s\n", entries.error().message.c_str());
      exit_code = exit_code::kFailed;
      return;
    }
    if (const auto* versions = catalog->versions()) {
      for (const auto& v : versions->List()) entries->push_back(catalog->EntryOf(v));
    }
    catalog->Judge(*entries, /*use_cache=*/true);
    Fenced fenced;
    for (const auto& e : *entries) fenced.push_back(catalog->FencedBecause(e));
    const auto& m = job->checkpoints.mirror;
    std::optional<mirror::DurabilityRecords> durable;
    if (m.path || m.remote || !m.command.empty()) durable = mirror::DurabilityLedger::Read(job->telemetry.state_dir);
    if (o->json) PrintJson(*entries, fenced, durable);
    else PrintTable(*entries, fenced, durable);
    std::uint64_t temp_bytes = 0;
    const auto temps = catalog->TempEntries(temp_bytes);
    if (!temps.empty()) {  // on stderr: the table and the JSON stay what they were
      std::fprintf(stderr, "%zu temp entr%s (%s, half-written saves; never resumed from):\n", temps.size(),
                   temps.size() == 1 ? "y" : "ies", FormatSize(temp_bytes).c_str());
      for (const auto& t : temps) std::fprintf(stderr, "  %s\n", t.string().c_str());
    }
    if (o->update_cache) {
      if (auto st = catalog->SaveCache(); !st) std::fprintf(stderr, "spotvisor: %s\n", st.error().message.c_str());
    }
    bool all_good = !entries->empty();
    for (std::size_t i = 0; i < entries->size(); ++i) all_good = all_good && (*entries)[i].verdict->good && !fenced[i];
    exit_code = all_good ? exit_code::kDone : exit_code::kFailed;
  });
}

}  // namespace spotvisor::cli

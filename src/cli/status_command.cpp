// `spotvisor status`: this machine's run from its state dir — the phase, the attempts, and
// with a mirror what is durable (the newest checkpoint on it, what is uploading or failed)
// and the planner's verdict (save + upload against the warning window) — and for a
// multi-node job the group as etcd holds it now: who holds which rank, the newest agreed
// epoch, who waits to start the next one with which good steps, and the stops (README
// "Multi-node jobs"). Reads once; changes nothing.
#include <cstdio>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>

#include "commands.hpp"
#include "job_options.hpp"
#include "spotvisor/cadence/checkpoint_journal.hpp"
#include "spotvisor/cli/app.hpp"
#include "spotvisor/coordination/etcd_coordinator.hpp"
#include "spotvisor/mirror/durability_ledger.hpp"
#include "spotvisor/mirror/durability_plan.hpp"
#include "spotvisor/preemption/warning_window.hpp"
#include "spotvisor/state/journal.hpp"
#include "spotvisor/util/clock.hpp"
#include "spotvisor/util/units.hpp"

namespace spotvisor::cli {
namespace {

// "3,1,2": ranks or steps, as listed.
template <class Numbers>
std::string Csv(const Numbers& numbers) {
  std::string out;
  for (auto n : numbers) out += (out.empty() ? "" : ",") + std::to_string(n);
  return out;
}

std::string Steps(const std::vector<std::uint64_t>& steps) { return steps.empty() ? "none" : Csv(steps); }

nlohmann::json ToJson(const coordination::GroupView& v, int nodes) {
  nlohmann::json j{{"nodes", nodes},
                   {"epoch", v.epoch},
                   {"failures", v.failures},
                   {"members", nlohmann::json::array()},
                   {"spares", nlohmann::json::array()},
                   {"joins", nlohmann::json::array()},
                   {"stops", nlohmann::json::array()},
                   {"done", nlohmann::json::array()},
                   {"shrinks", nlohmann::json::array()},
                   {"unreadable", v.unreadable}};
  const auto member = [](const char* key, auto id, const coordination::MemberRecord& m) {
    return nlohmann::json{
        {key, id}, {"advertise", m.advertise}, {"host", m.host}, {"pid", m.pid}, {"since_unix_ms", m.since_unix_ms}};
  };
  for (const auto& [rank, m] : v.members) j["members"].push_back(member("rank", rank, m));
  for (const auto& [lease, m] : v.spares) j["spares"].push_back(member("lease", lease, m));
  for (const auto& [epoch, joined] : v.joins) {
    for (const auto& [rank, record] : joined)
      j["joins"].push_back({{"epoch", epoch}, {"rank", rank}, {"steps", record.steps}});
  }
  for (const auto& [epoch, s] : v.stops) {
    j["stops"].push_back(
        {{"epoch", epoch}, {"rank", s.rank}, {"why", s.why}, {"deadline_unix_ms", s.deadline_unix_ms}});
  }
  for (const auto& [epoch, ranks] : v.done) j["done"].push_back({{"epoch", epoch}, {"ranks", ranks}});
  for (const auto& [epoch, ranks] : v.shrinks) j["shrinks"].push_back({{"epoch", epoch}, {"ranks", ranks}});
  return j;
}

// The group as text: who holds which rank, the spares, each epoch's joins, stops, ends and
// shrinks.
void PrintGroup(const coordination::GroupView& view, const std::string& job_name, int nodes) {
  std::printf("job %s: %zu of %d ranks held, %zu spare%s waiting; newest agreed epoch %llu\n", job_name.c_str(),
              view.members.size(), nodes, view.spares.size(), view.spares.size() == 1 ? "" : "s",
              static_cast<unsigned long long>(view.epoch));
  for (int rank = 0; rank < nodes; ++rank) {
    const auto m = view.members.find(rank);
    if (m == view.members.end()) {
      std::printf("  rank %d  free\n", rank);
    } else {
      std::printf("  rank %d  %s  host=%s pid=%lld\n", rank, m->second.advertise.c_str(), m->second.host.c_str(),
                  static_cast<long long>(m->second.pid));
    }
  }
  for (const auto& [lease, m] : view.spares) {
    std::printf("  spare   %s  host=%s pid=%lld\n", m.advertise.c_str(), m.host.c_str(), static_cast<long long>(m.pid));
  }
  for (const auto& [epoch, joined] : view.joins) {
    if (epoch <= view.epoch) continue;  // agreed and started already
    std::printf("  epoch %llu: %zu of %d joined\n", static_cast<unsigned long long>(epoch), joined.size(), nodes);
    for (const auto& [rank, record] : joined)
      std::printf("    rank %d good steps %s\n", rank, Steps(record.steps).c_str());
  }
  for (const auto& [epoch, s] : view.stops) {
    std::printf("  epoch %llu stopped by rank %d: %s\n", static_cast<unsigned long long>(epoch), s.rank, s.why.c_str());
  }
  for (const auto& [epoch, ranks] : view.done) {
    std::printf("  epoch %llu: finished on rank %s\n", static_cast<unsigned long long>(epoch), Csv(ranks).c_str());
  }
  for (const auto& [epoch, ranks] : view.shrinks) {
    std::printf("  epoch %llu: shrunk to %zu of %d nodes (ranks %s)\n", static_cast<unsigned long long>(epoch),
                ranks.size(), nodes, Csv(ranks).c_str());
  }
  for (const auto& key : view.unreadable) std::printf("  unreadable: %s\n", key.c_str());
}

// This machine's run, read from the state dir: nullopt when no run has been there yet.
struct LocalView {
  state::PersistedState state;
  int attempts_recorded = 0;
  bool mirror = false;
  mirror::DurabilityRecords durability;
  // The newest durable checkpoint (name, record) and the planner's verdict for the newest
  // checkpoint's bytes at the last measured upload rate.
  std::optional<std::pair<std::string, mirror::DurabilityRecord>> newest_durable;
  std::optional<mirror::DurabilityPlan> plan;
};

Result<std::optional<LocalView>> ReadLocal(const config::JobConfig& job) {
  const auto& dir = job.telemetry.state_dir;
  std::error_code ec;
  if (!std::filesystem::exists(dir / "state.json", ec)) return std::optional<LocalView>{};
  auto journal = state::Journal::Open(dir);
  if (!journal) return journal.error();
  LocalView v;
  v.state = journal->state();
  v.attempts_recorded = static_cast<int>(state::ReadAttemptRecords(dir).size());
  const auto& m = job.checkpoints.mirror;
  v.mirror = m.path || m.remote || !m.command.empty();
  if (!v.mirror) return std::optional<LocalView>{std::move(v)};
  v.durability = mirror::DurabilityLedger::Read(dir);
  const mirror::DurabilityRecord* newest = nullptr;
  for (const auto& [name, r] : v.durability) {
    if (r.state == mirror::Durability::kDurable && (!v.newest_durable || r.step > v.newest_durable->second.step))
      v.newest_durable = std::pair{name, r};
    if (r.bytes > 0 && (!newest || r.step > newest->step)) newest = &r;
  }
  const auto rate = mirror::LoadUploadRate(dir);
  if (rate && *rate > 0 && newest) {
    const auto window = preemption::WarningWindow(config::ToString(job.provider.kind), job.provider);
    v.plan =
        mirror::PlanDurability(window, mirror::LastSaveTime(cadence::ReadCheckpointRecords(dir)), newest->bytes, *rate);
  }
  return std::optional<LocalView>{std::move(v)};
}

double Secs(Duration d) { return std::chrono::duration<double>(d).count(); }

std::string Sec1(double seconds) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f s", seconds);
  return buf;
}

nlohmann::json ToJson(const LocalView& v, std::int64_t now_ms) {
  nlohmann::json j{{"phase", v.state.phase},
                   {"attempts", v.state.attempts},
                   {"preemptions", v.state.preemptions},
                   {"last_exit_message", v.state.last_exit_message}};
  if (!v.mirror) return j;
  nlohmann::json d{{"newest_durable", nullptr},
                   {"uploading", nlohmann::json::array()},
                   {"failed", nlohmann::json::array()},
                   {"plan", nullptr}};
  if (v.newest_durable) {
    const auto& [name, r] = *v.newest_durable;
    d["newest_durable"] = {{"name", name},
                           {"step", r.step},
                           {"bytes", r.bytes},
                           {"durable_unix_ms", r.durable_ms ? nlohmann::json(*r.durable_ms) : nlohmann::json(nullptr)}};
    if (r.durable_ms) d["newest_durable"]["age_s"] = static_cast<double>(now_ms - *r.durable_ms) / 1000.0;
  }
  for (const auto& [name, r] : v.durability) {
    if (r.state == mirror::Durability::kUploading) d["uploading"].push_back({{"name", name}, {"bytes", r.bytes}});
    if (r.state == mirror::Durability::kFailed) d["failed"].push_back({{"name", name}, {"why", r.detail}});
  }
  if (v.plan) {
    d["plan"] = {{"fits", v.plan->fits()},
                 {"window_s", Secs(v.plan->window)},
                 {"save_s", v.plan->save ? nlohmann::json(Secs(*v.plan->save)) : nlohmann::json(nullptr)},
                 {"upload_s", Secs(v.plan->upload)},
                 {"margin_s", Secs(v.plan->margin)},
                 {"bytes", v.plan->bytes},
                 {"upload_rate", v.plan->upload_rate}};
  }
  j["durability"] = d;
  return j;
}

void PrintLocal(const LocalView& v, const config::JobConfig& job, std::int64_t now_ms) {
  std::printf("job %s on this machine: %s, %d attempt%s (%d preempted)", job.job.name.c_str(),
              v.state.phase.empty() ? "phase unknown" : v.state.phase.c_str(), v.state.attempts,
              v.state.attempts == 1 ? "" : "s", v.state.preemptions);
  if (!v.state.last_exit_message.empty()) std::printf("; last exit: %s", v.state.last_exit_message.c_str());
  std::printf("\n");
  if (!v.mirror) return;
  if (v.newest_durable) {
    const auto& [name, r] = *v.newest_durable;
    std::printf("  durable: %s (step %llu, %s)", name.c_str(), static_cast<unsigned long long>(r.step),
                FormatSize(r.bytes).c_str());
    if (r.durable_ms) std::printf(", on the mirror for %.0f s", static_cast<double>(now_ms - *r.durable_ms) / 1000.0);
    std::printf("\n");
  } else {
    std::printf("  durable: nothing on the mirror yet: a new VM would start from scratch\n");
  }
  for (const auto& [name, r] : v.durability) {
    if (r.state == mirror::Durability::kUploading)
      std::printf("  uploading: %s (%s)\n", name.c_str(), FormatSize(r.bytes).c_str());
    if (r.state == mirror::Durability::kFailed) std::printf("  failed: %s: %s\n", name.c_str(), r.detail.c_str());
  }
  if (!v.plan) {
    std::printf("  planner: no upload measured yet\n");
    return;
  }
  const auto& p = *v.plan;
  const std::string verdict = p.fits() ? "fits, " + Sec1(Secs(p.margin)) + " to spare"
                                       : "AT RISK by " + Sec1(-Secs(p.margin)) + " — " + p.Advice();
  std::printf("  planner: save %s + upload %s (%s at %s) ≈ %s after a notice; the warning window is %s: %s\n",
              p.save ? Sec1(Secs(*p.save)).c_str() : "not measured", Sec1(Secs(p.upload)).c_str(),
              FormatSize(p.bytes).c_str(), FormatRate(p.upload_rate).c_str(), Sec1(Secs(p.window - p.margin)).c_str(),
              Sec1(Secs(p.window)).c_str(), verdict.c_str());
}

}  // namespace

void AddStatusCommand(CLI::App& app, int& exit_code) {
  auto o = std::make_shared<JobOptions>();
  auto json = std::make_shared<bool>(false);
  CLI::App* cmd =
      app.add_subcommand("status",
                         "Show the job's state on this machine (with a mirror: what is durable, and whether save + "
                         "upload fits the warning window) and a multi-node job's group in etcd (changes nothing)");
  cmd->footer(
      "Example:\n  spotvisor status --config job.yaml\n"
      "Exit codes: 0 shown, 1 the state dir or etcd could not be read, 64 usage, 78 configuration error.");
  AddJobOptions(*cmd, *o, /*with_command=*/false);
  cmd->add_flag("--json", *json, "One JSON object instead of text");
  cmd->callback([o, json, &exit_code] {
    auto job = LoadJobOrExit(*o, /*require_command=*/false, exit_code);
    if (!job) return;
    const std::int64_t now_ms = UnixMillis(SystemClock().WallNow());
    auto local = ReadLocal(*job);
    if (!local) {
      std::fprintf(stderr, "spotvisor: %s\n", local.error().message.c_str());
      exit_code = exit_code::kFailed;
      return;
    }
    std::optional<coordination::GroupView> view;
    if (job->coordination.enabled()) {
      auto read = coordination::ReadGroup(*job);
      if (!read) {
        std::fprintf(stderr, "spotvisor: %s\n", read.error().message.c_str());
        exit_code = exit_code::kFailed;
        return;
      }
      view = std::move(*read);
    }
    const int nodes = job->coordination.nodes;
    if (*json) {
      nlohmann::json out = view ? ToJson(*view, nodes) : nlohmann::json::object();
      out["local"] = *local ? ToJson(**local, now_ms) : nlohmann::json(nullptr);
      std::printf("%s\n", out.dump(2).c_str());
      exit_code = exit_code::kDone;
      return;
    }
    if (*local) {
      PrintLocal(**local, *job, now_ms);
    } else {
      std::printf("job %s on this machine: no run yet (no state in %s)\n", job->job.name.c_str(),
                  job->telemetry.state_dir.c_str());
    }
    if (view) PrintGroup(*view, job->job.name, nodes);
    exit_code = exit_code::kDone;
  });
}

}  // namespace spotvisor::cli

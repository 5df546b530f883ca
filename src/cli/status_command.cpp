// `spotvisor status`: a multi-node job's group as etcd holds it now — who holds which rank,
// the newest agreed epoch, who waits to start the next one with which good steps, and the
// stops (README "Multi-node jobs"). Reads once; changes nothing.
#include <cstdio>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>

#include "commands.hpp"
#include "job_options.hpp"
#include "spotvisor/cli/app.hpp"
#include "spotvisor/coordination/etcd_coordinator.hpp"

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

}  // namespace

void AddStatusCommand(CLI::App& app, int& exit_code) {
  auto o = std::make_shared<JobOptions>();
  auto json = std::make_shared<bool>(false);
  CLI::App* cmd = app.add_subcommand("status", "Show a multi-node job's group in etcd (changes nothing)");
  cmd->footer(
      "Example:\n  spotvisor status --config job.yaml\n"
      "Exit codes: 0 shown, 1 etcd could not be read, 64 usage, 78 configuration error (or no coordination.etcd).");
  AddJobOptions(*cmd, *o, /*with_command=*/false);
  cmd->add_flag("--json", *json, "One JSON object instead of text");
  cmd->callback([o, json, &exit_code] {
    auto job = LoadJobOrExit(*o, /*require_command=*/false, exit_code);
    if (!job) return;
    if (!job->coordination.enabled()) {
      exit_code = ConfigError((job->source_file ? job->source_file->string() : std::string("the job")) +
                              " has no coordination.etcd: a single node has no group");
      return;
    }
    auto view = coordination::ReadGroup(*job);
    if (!view) {
      std::fprintf(stderr, "spotvisor: %s\n", view.error().message.c_str());
      exit_code = exit_code::kFailed;
      return;
    }
    const int nodes = job->coordination.nodes;
    if (*json) {
      std::printf("%s\n", ToJson(*view, nodes).dump(2).c_str());
      exit_code = exit_code::kDone;
      return;
    }
    PrintGroup(*view, job->job.name, nodes);
    exit_code = exit_code::kDone;
  });
}

}  // namespace spotvisor::cli

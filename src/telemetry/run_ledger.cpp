// run.json <-> RunLedger; see run_ledger.hpp. Unknown fields are ignored (a newer
// spotvisor may add some); missing ones take their defaults.
#include "spotvisor/telemetry/run_ledger.hpp"

#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "spotvisor/cost/cost_model.hpp"
#include "spotvisor/telemetry/json_opt.hpp"
#include "spotvisor/util/atomic_file.hpp"

namespace spotvisor::telemetry {
namespace {

using nlohmann::json;

template <class T>
std::optional<T> GetOpt(const json& j, const char* key) {
  if (!j.contains(key) || j.at(key).is_null()) return std::nullopt;
  return j.at(key).get<T>();
}

json ToJson(const SessionRecord& s) {
  return json{{"started_ms", s.started_ms},    {"last_seen_ms", s.last_seen_ms},    {"ended_ms", OptJson(s.ended_ms)},
              {"boot_ms", OptJson(s.boot_ms)}, {"exit_code", OptJson(s.exit_code)}, {"exit_message", s.exit_message},
              {"hostname", s.hostname}};
}
SessionRecord SessionFrom(const json& j) {
  SessionRecord s;
  s.started_ms = j.value("started_ms", std::int64_t{0});
  s.last_seen_ms = j.value("last_seen_ms", s.started_ms);
  s.ended_ms = GetOpt<std::int64_t>(j, "ended_ms");
  s.boot_ms = GetOpt<std::int64_t>(j, "boot_ms");
  s.exit_code = GetOpt<int>(j, "exit_code");
  s.exit_message = j.value("exit_message", "");
  s.hostname = j.value("hostname", "");
  return s;
}

json ToJson(const NoticeRecord& n) {
  return json{{"received_ms", n.received_ms},
              {"provider", n.provider},
              {"kind", n.kind},
              {"action", n.action},
              {"deadline_ms", OptJson(n.deadline_ms)},
              {"signal_ms", OptJson(n.signal_ms)},
              {"attempt", n.attempt},
              {"saved_ms", OptJson(n.saved_ms)},
              {"validated_ms", OptJson(n.validated_ms)},
              {"mirrored_ms", OptJson(n.mirrored_ms)},
              {"checkpoint", n.checkpoint},
              {"step", OptJson(n.step)},
              {"steps_lost", OptJson(n.steps_lost)},
              {"outcome", n.outcome},
              {"mirror", n.mirror},
              {"predicted_durable_ms", OptJson(n.predicted_durable_ms)},
              {"durable_step", OptJson(n.durable_step)}};
}
NoticeRecord NoticeFrom(const json& j) {
  NoticeRecord n;
  n.received_ms = j.value("received_ms", std::int64_t{0});
  n.provider = j.value("provider", "");
  n.kind = j.value("kind", "");
  n.action = j.value("action", "");
  n.deadline_ms = GetOpt<std::int64_t>(j, "deadline_ms");
  n.signal_ms = GetOpt<std::int64_t>(j, "signal_ms");
  n.attempt = j.value("attempt", 0);
  n.saved_ms = GetOpt<std::int64_t>(j, "saved_ms");
  n.validated_ms = GetOpt<std::int64_t>(j, "validated_ms");
  n.mirrored_ms = GetOpt<std::int64_t>(j, "mirrored_ms");
  n.checkpoint = j.value("checkpoint", "");
  n.step = GetOpt<std::uint64_t>(j, "step");
  n.steps_lost = GetOpt<std::uint64_t>(j, "steps_lost");
  n.outcome = j.value("outcome", "");
  n.mirror = j.value("mirror", false);
  n.predicted_durable_ms = GetOpt<std::int64_t>(j, "predicted_durable_ms");
  n.durable_step = GetOpt<std::uint64_t>(j, "durable_step");
  return n;
}

json ToJson(const CheckpointRecord& c) {
  return json{{"name", c.name},
              {"step", c.step},
              {"bytes", c.bytes},
              {"mtime_ms", c.mtime_ms},
              {"write_ms", OptJson(c.write_ms)},
              {"good", c.good},
              {"reason", c.reason},
              {"attempt", c.attempt},
              {"seen_ms", c.seen_ms}};
}
CheckpointRecord CheckpointFrom(const json& j) {
  CheckpointRecord c;
  c.name = j.value("name", "");
  c.step = j.value("step", std::uint64_t{0});
  c.bytes = j.value("bytes", std::uint64_t{0});
  c.mtime_ms = j.value("mtime_ms", std::int64_t{0});
  c.write_ms = GetOpt<std::int64_t>(j, "write_ms");
  c.good = j.value("good", false);
  c.reason = j.value("reason", "");
  c.attempt = j.value("attempt", 0);
  c.seen_ms = j.value("seen_ms", std::int64_t{0});
  return c;
}

}  // namespace

std::optional<std::string> NoticeOutcome(const NoticeRecord& n, bool final) {
  if (!n.outcome.empty()) return n.outcome;
  if (n.validated_ms) {
    if (!n.deadline_ms) return "no-deadline";
    return *n.validated_ms <= *n.deadline_ms ? "saved" : "saved-late";
  }
  if (final) return "not-saved";
  return std::nullopt;
}

void RunLedger::AddFirstProgress(int attempt, std::int64_t ms) {
  first_progress_ms.emplace(attempt, ms);
  if (first_progress_ms.size() > kMaxProgressRecords) first_progress_ms.erase(first_progress_ms.begin());
}

void RunLedger::AddWaiting(Interval interval) {
  if (interval.end_ms <= interval.start_ms) return;
  waiting.push_back(interval);
  if (waiting.size() > kMaxProgressRecords) waiting.erase(waiting.begin());
}

void RunLedger::AddCheckpoint(const CheckpointRecord& record) {
  checkpoints.push_back(record);
  if (checkpoints.size() > kMaxCheckpointRecords) checkpoints.erase(checkpoints.begin());
  if (record.good) {
    ++checkpoint_totals.good;
    checkpoint_totals.bytes += record.bytes;
  } else {
    ++checkpoint_totals.corrupt;
  }
  if (record.write_ms) {
    checkpoint_totals.write_ms += *record.write_ms;
    ++checkpoint_totals.write_measured;
  }
}

void RunLedger::AddHook(const HookRecord& record) {
  hooks.push_back(record);
  if (hooks.size() > kMaxHookRecords) hooks.erase(hooks.begin());
  if (record.outcome != "ok" && record.outcome != "skipped") ++hook_failures[record.hook];
}

Status RunLedger::Save(const std::filesystem::path& state_dir) const {
  json j{{"format", 1}, {"job", job}, {"labels", labels}, {"version", version}, {"config_hash", config_hash}};
  j["fingerprints"] = json::array();
  for (const auto& f : fingerprints) {
    j["fingerprints"].push_back({{"path", f.path}, {"hash", f.hash}, {"bytes", f.bytes}, {"error", f.error}});
  }
  j["host"] = {{"hostname", host.hostname}, {"provider", host.provider}, {"instance_type", host.instance_type},
               {"zone", host.zone},         {"region", host.region},     {"source", host.source}};
  j["gpu"] = {{"available", gpu.available},
              {"reason", gpu.reason},
              {"driver", gpu.driver},
              {"models", gpu.models},
              {"memory_total_bytes", gpu.memory_total_bytes},
              {"peak_vram_bytes", gpu.peak_vram_bytes}};
  j["cost"] = cost::CostSectionToJson(cost);
  for (const char* key : {"sessions", "notices", "checkpoints", "hooks"}) j[key] = json::array();
  for (const auto& s : sessions) j["sessions"].push_back(ToJson(s));
  for (const auto& n : notices) j["notices"].push_back(ToJson(n));
  for (const auto& c : checkpoints) j["checkpoints"].push_back(ToJson(c));
  for (const auto& h : hooks) {
    j["hooks"].push_back({{"hook", h.hook},
                          {"outcome", h.outcome},
                          {"message", h.message},
                          {"started_ms", h.started_ms},
                          {"duration_ms", h.duration_ms}});
  }
  const auto& t = checkpoint_totals;
  j["checkpoint_totals"] = {{"good", t.good},
                            {"corrupt", t.corrupt},
                            {"bytes", t.bytes},
                            {"write_ms", t.write_ms},
                            {"write_measured", t.write_measured}};
  j["hook_failures"] = hook_failures;
  j["budget_warned_ms"] = OptJson(budget_warned_ms);
  j["budget_exhausted_ms"] = OptJson(budget_exhausted_ms);
  j["first_progress_from"] = first_progress_from;
  j["first_progress_ms"] = json::object();
  for (const auto& [attempt, ms] : first_progress_ms) j["first_progress_ms"][std::to_string(attempt)] = ms;
  j["waiting"] = json::array();
  for (const auto& w : waiting) j["waiting"].push_back({{"start_ms", w.start_ms}, {"end_ms", w.end_ms}});
  // Rewritten at every change and every 30 s: atomic, not fsynced (the report and the
  // journal are the durable records).
  return WriteFileAtomically(state_dir / kLedgerFileName, j.dump(2) + "\n", Durability::kAtomicOnly);
}

Result<RunLedger> RunLedger::Load(const std::filesystem::path& state_dir) {
  RunLedger l;
  const auto path = state_dir / kLedgerFileName;
  std::ifstream in(path);
  if (!in) return l;
  std::ostringstream text;
  text << in.rdbuf();
  try {
    const json j = json::parse(text.str());
    l.job = j.value("job", "");
    l.labels = j.value("labels", std::map<std::string, std::string>{});
    l.version = j.value("version", "");
    l.config_hash = j.value("config_hash", "");
    for (const auto& f : j.value("fingerprints", json::array())) {
      l.fingerprints.push_back(
          {f.value("path", ""), f.value("hash", ""), f.value("bytes", std::uint64_t{0}), f.value("error", "")});
    }
    const json host = j.value("host", json::object());
    l.host = {host.value("hostname", ""), host.value("provider", ""), host.value("instance_type", ""),
              host.value("zone", ""),     host.value("region", ""),   host.value("source", "")};
    const json gpu = j.value("gpu", json::object());
    l.gpu.available = gpu.value("available", false);
    l.gpu.reason = gpu.value("reason", "");
    l.gpu.driver = gpu.value("driver", "");
    l.gpu.models = gpu.value("models", std::vector<std::string>{});
    l.gpu.memory_total_bytes = gpu.value("memory_total_bytes", std::uint64_t{0});
    l.gpu.peak_vram_bytes = gpu.value("peak_vram_bytes", std::uint64_t{0});
    if (j.contains("cost")) {
      auto c = cost::CostSectionFromJson(j.at("cost"));
      if (!c) return Error{path.string() + ": " + c.error().message};
      l.cost = *c;
    }
    for (const auto& s : j.value("sessions", json::array())) l.sessions.push_back(SessionFrom(s));
    for (const auto& n : j.value("notices", json::array())) l.notices.push_back(NoticeFrom(n));
    for (const auto& c : j.value("checkpoints", json::array())) l.checkpoints.push_back(CheckpointFrom(c));
    for (const auto& h : j.value("hooks", json::array())) {
      l.hooks.push_back({h.value("hook", ""), h.value("outcome", ""), h.value("message", ""),
                         h.value("started_ms", std::int64_t{0}), h.value("duration_ms", std::int64_t{0})});
    }
    const json t = j.value("checkpoint_totals", json::object());
    l.checkpoint_totals = {t.value("good", 0), t.value("corrupt", 0), t.value("bytes", std::uint64_t{0}),
                           t.value("write_ms", std::int64_t{0}), t.value("write_measured", 0)};
    l.hook_failures = j.value("hook_failures", std::map<std::string, int>{});
    l.budget_warned_ms = GetOpt<std::int64_t>(j, "budget_warned_ms");
    l.budget_exhausted_ms = GetOpt<std::int64_t>(j, "budget_exhausted_ms");
    l.first_progress_from = j.value("first_progress_from", "");
    const json progress = j.value("first_progress_ms", json::object());  // items() needs it alive
    for (const auto& [attempt, ms] : progress.items()) {
      l.first_progress_ms[std::stoi(attempt)] = ms.get<std::int64_t>();
    }
    for (const auto& w : j.value("waiting", json::array())) {
      l.waiting.push_back({w.value("start_ms", std::int64_t{0}), w.value("end_ms", std::int64_t{0})});
    }
  } catch (const std::exception& e) {  // json's, or stoi's on a bad attempt key
    return Error{path.string() + " is corrupt (" + e.what() + "); move it away to start the run record afresh"};
  }
  return l;
}

}  // namespace spotvisor::telemetry

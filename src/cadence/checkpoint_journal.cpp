// checkpoints.jsonl; see checkpoint_journal.hpp. Append + fdatasync per line, like the
// attempts journal: a power cut loses at most the line being written.
#include "spotvisor/cadence/checkpoint_journal.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>

#include "spotvisor/util/atomic_file.hpp"

namespace spotvisor::cadence {
namespace {

using json = nlohmann::json;

template <class T>
void Put(json& j, const char* key, const std::optional<T>& v) {
  if (v) j[key] = *v;
}

template <class T>
void Get(const json& j, const char* key, std::optional<T>& v) {
  if (j.contains(key) && !j[key].is_null()) v = j[key].get<T>();
}

json ToJson(const CheckpointRecord& r) {
  json j{{"at_ms", r.at_ms}, {"event", r.event}, {"reason", r.reason}, {"attempt", r.attempt}};
  if (!r.path.empty()) j["path"] = r.path;
  Put(j, "step", r.step);
  Put(j, "size_bytes", r.size_bytes);
  Put(j, "cost_ms", r.cost_ms);
  Put(j, "waited_ms", r.waited_ms);
  Put(j, "interval_ms", r.interval_ms);
  Put(j, "c_ms", r.c_ms);
  Put(j, "m_ms", r.m_ms);
  Put(j, "overhead_pct", r.overhead_pct);
  Put(j, "expected_waste_pct", r.expected_waste_pct);
  return j;
}

CheckpointRecord FromJson(const json& j) {
  CheckpointRecord r;
  r.at_ms = j.value("at_ms", std::int64_t{0});
  r.event = j.value("event", std::string());
  r.reason = j.value("reason", std::string());
  r.attempt = j.value("attempt", 0);
  r.path = j.value("path", std::string());
  Get(j, "step", r.step);
  Get(j, "size_bytes", r.size_bytes);
  Get(j, "cost_ms", r.cost_ms);
  Get(j, "waited_ms", r.waited_ms);
  Get(j, "interval_ms", r.interval_ms);
  Get(j, "c_ms", r.c_ms);
  Get(j, "m_ms", r.m_ms);
  Get(j, "overhead_pct", r.overhead_pct);
  Get(j, "expected_waste_pct", r.expected_waste_pct);
  return r;
}

}  // namespace

Status AppendCheckpointRecord(const std::filesystem::path& state_dir, const CheckpointRecord& record) {
  std::error_code ec;
  std::filesystem::create_directories(state_dir, ec);
  return AppendLineDurably(state_dir / kCheckpointJournalName, ToJson(record).dump() + "\n");
}

std::vector<CheckpointRecord> ReadCheckpointRecords(const std::filesystem::path& state_dir) {
  std::vector<CheckpointRecord> out;
  std::ifstream in(state_dir / kCheckpointJournalName);
  for (std::string line; std::getline(in, line);) {
    try {
      out.push_back(FromJson(json::parse(line)));
    } catch (const json::exception&) {
      // A torn line from a power cut mid-append: skipped.
    }
  }
  return out;
}

}  // namespace spotvisor::cadence

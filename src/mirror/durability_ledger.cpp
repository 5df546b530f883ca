// The durability records; see durability_ledger.hpp.
#include "spotvisor/mirror/durability_ledger.hpp"

#include <algorithm>
#include <fstream>
#include <nlohmann/json.hpp>
#include <vector>

#include "spotvisor/log/log.hpp"
#include "spotvisor/util/atomic_file.hpp"

namespace spotvisor::mirror {
namespace {

using json = nlohmann::json;
constexpr std::string_view kFile = "durability.json";

std::optional<Durability> Parse(const std::string& s) {
  for (auto d : {Durability::kUploading, Durability::kDurable, Durability::kFailed, Durability::kSuperseded})
    if (s == ToString(d)) return d;
  return std::nullopt;
}

}  // namespace

const char* ToString(Durability d) {
  switch (d) {
    case Durability::kUploading:
      return "uploading";
    case Durability::kDurable:
      return "durable";
    case Durability::kFailed:
      return "failed";
    case Durability::kSuperseded:
      return "superseded";
  }
  return "?";
}

DurabilityLedger::DurabilityLedger(std::filesystem::path state_dir)
    : path_(state_dir / kFile), records_(Read(state_dir)) {}

DurabilityRecords DurabilityLedger::Read(const std::filesystem::path& state_dir) {
  DurabilityRecords out;
  std::ifstream in(state_dir / kFile);
  if (!in) return out;
  try {
    const json doc = json::parse(in);
    for (const auto& [name, j] : doc.at("checkpoints").items()) {
      const auto state = Parse(j.at("state").get<std::string>());
      if (!state) continue;
      DurabilityRecord r;
      r.step = j.at("step").get<std::uint64_t>();
      r.state = *state;
      r.bytes = j.value("bytes", std::uint64_t{0});
      r.upload_started_ms = j.value("upload_started_ms", std::int64_t{0});
      if (j.contains("durable_ms") && j["durable_ms"].is_number()) r.durable_ms = j["durable_ms"].get<std::int64_t>();
      r.detail = j.value("detail", std::string());
      out[name] = r;
    }
  } catch (const json::exception&) {
    return {};  // a torn or foreign file: nothing known, the next change rewrites it
  }
  return out;
}

std::optional<DurabilityRecord> DurabilityLedger::Get(const std::string& name) {
  std::lock_guard lock(mutex_);
  const auto it = records_.find(name);
  if (it == records_.end()) return std::nullopt;
  return it->second;
}

void DurabilityLedger::Set(const std::string& name, const DurabilityRecord& record) {
  std::lock_guard lock(mutex_);
  records_[name] = record;
  if (records_.size() > kMaxDurabilityRecords) {
    std::vector<std::pair<std::uint64_t, std::string>> by_step;
    for (const auto& [n, r] : records_) by_step.emplace_back(r.step, n);
    std::sort(by_step.begin(), by_step.end());
    for (std::size_t i = 0; i + kMaxDurabilityRecords < by_step.size(); ++i) records_.erase(by_step[i].second);
  }
  json all = json::object();
  for (const auto& [n, r] : records_) {
    all[n] = {{"step", r.step},
              {"state", ToString(r.state)},
              {"bytes", r.bytes},
              {"upload_started_ms", r.upload_started_ms},
              {"durable_ms", r.durable_ms ? json(*r.durable_ms) : json(nullptr)},
              {"detail", r.detail}};
  }
  std::error_code ec;
  std::filesystem::create_directories(path_.parent_path(), ec);
  if (Status s = WriteFileAtomically(path_, json{{"checkpoints", all}}.dump(1) + "\n"); !s && !warned_) {
    warned_ = true;
    log::Log(log::LogLevel::kWarning, "event=durability_unsaved error=" + log::Quote(s.error().message));
  }
}

}  // namespace spotvisor::mirror

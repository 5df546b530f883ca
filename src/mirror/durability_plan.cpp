// The planner's arithmetic and words; see durability_plan.hpp.
#include "spotvisor/mirror/durability_plan.hpp"

#include <cmath>
#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>

#include "spotvisor/log/log.hpp"
#include "spotvisor/util/atomic_file.hpp"
#include "spotvisor/util/units.hpp"

namespace spotvisor::mirror {
namespace {

using log::Quote;

constexpr std::string_view kUploadRateFile = "upload-rate.json";

double S(Duration d) { return std::chrono::duration<double>(d).count(); }

std::string Fixed1(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f", v);
  return buf;
}

}  // namespace

DurabilityPlan PlanDurability(Duration window, std::optional<Duration> save, std::uint64_t bytes, double upload_rate) {
  DurabilityPlan p;
  p.window = window;
  p.save = save;
  p.bytes = bytes;
  p.upload_rate = upload_rate;
  const double upload_s = upload_rate > 0 ? static_cast<double>(bytes) / upload_rate : 0.0;
  p.upload = std::chrono::duration_cast<Duration>(std::chrono::duration<double>(upload_s));
  p.margin = window - save.value_or(Duration::zero()) - p.upload;
  return p;
}

std::string DurabilityPlan::Numbers() const {
  return "window_s=" + Fixed1(S(window)) + " save_s=" + (save ? Fixed1(S(*save)) : std::string("unmeasured")) +
         " upload_s=" + Fixed1(S(upload)) + " margin_s=" + Fixed1(S(margin)) + " bytes=" + std::to_string(bytes) +
         " upload_rate=" + Quote(FormatRate(upload_rate));
}

std::string DurabilityPlan::Advice() const {
  const double left_s = S(window - save.value_or(Duration::zero()));
  std::string advice;
  if (left_s <= 0) {
    advice = "the save alone takes longer than the " + Fixed1(S(window)) +
             " s window: save less (sharded or smaller checkpoints) or faster";
  } else {
    const double needed = static_cast<double>(bytes) / left_s;
    const auto largest = static_cast<std::uint64_t>(upload_rate * left_s);
    advice = "needs an upload rate of " + FormatRate(needed) + " (measured " + FormatRate(upload_rate) +
             "), or a checkpoint of at most " + FormatSize(largest) + " (this one: " + FormatSize(bytes) + ")";
  }
  return advice +
         "; until then the newest durable checkpoint is the last periodic one: a shorter cadence.every keeps it recent";
}

std::optional<Duration> LastSaveTime(const std::vector<cadence::CheckpointRecord>& records) {
  for (auto it = records.rbegin(); it != records.rend(); ++it) {
    if (it->event == "checkpoint" && it->cost_ms) return std::chrono::milliseconds(*it->cost_ms);
  }
  return std::nullopt;
}

Status SaveUploadRate(const std::filesystem::path& state_dir, double bytes_per_second, WallTime measured_at) {
  std::error_code ec;
  std::filesystem::create_directories(state_dir, ec);
  const nlohmann::json j{{"bytes_per_second", bytes_per_second}, {"measured_unix_ms", UnixMillis(measured_at)}};
  return WriteFileAtomically(state_dir / kUploadRateFile, j.dump() + "\n");
}

std::optional<double> LoadUploadRate(const std::filesystem::path& state_dir) {
  std::ifstream in(state_dir / kUploadRateFile);
  if (!in) return std::nullopt;
  try {
    const double rate = nlohmann::json::parse(in).at("bytes_per_second").get<double>();
    if (rate > 0 && std::isfinite(rate)) return rate;
  } catch (const nlohmann::json::exception&) {
  }
  return std::nullopt;
}

}  // namespace spotvisor::mirror

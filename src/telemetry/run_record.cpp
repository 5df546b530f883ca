// The run record during a run; see run_record.hpp.
#include "run_record.hpp"

#include <algorithm>

#include "spotvisor/log/log.hpp"
#include "spotvisor/telemetry/run_facts.hpp"

namespace spotvisor::telemetry {

using log::Log;
using log::LogLevel;
using log::Quote;
namespace {

constexpr std::size_t kAttemptsKept = 64;  // ended attempts held as records; older ones are folded

}  // namespace

void RunRecord::Load() {
  auto loaded = RunLedger::Load(job_.telemetry.state_dir);
  if (loaded) {
    ledger_ = std::move(*loaded);
  } else {
    const auto aside = job_.telemetry.state_dir / ("run.json.corrupt-" + std::to_string(UnixMillis(clock_.WallNow())));
    std::error_code ec;
    std::filesystem::rename(job_.telemetry.state_dir / kLedgerFileName, aside, ec);
    Log(LogLevel::kError,
        "event=run_record_corrupt error=" + Quote(loaded.error().message) + " moved_to=" + Quote(aside.string()));
  }
  if (auto journal = state::Journal::Open(job_.telemetry.state_dir)) attempts_ = journal->ReadAttempts();
  for (const auto& a : attempts_) last_attempt_ = std::max(last_attempt_, a.attempt);
  FoldOldest(ledger_, attempts_, folded_, kAttemptsKept);
  ledger_.job = job_.job.name;
  ledger_.labels = job_.job.labels;
  ledger_.version = SPOTVISOR_VERSION;
  ledger_.config_hash = ConfigHash(job_);
  ledger_.fingerprints = FingerprintFiles(job_.telemetry.fingerprint_files);
  for (const auto& f : ledger_.fingerprints) {
    if (!f.error.empty())
      Log(LogLevel::kWarning, "event=fingerprint_failed path=" + Quote(f.path) + " error=" + Quote(f.error));
  }
  ledger_.host = DescribeHost(job_);
  ledger_.cost = job_.cost;
  SessionRecord s;
  s.started_ms = s.last_seen_ms = UnixMillis(clock_.WallNow());
  s.boot_ms = BootTimeMs();
  s.hostname = ledger_.host.hostname;
  ledger_.sessions.push_back(s);
  Save();
}

void RunRecord::Save() {
  // Said once when writing starts to fail and once when it works again, never per save.
  const Status s = ledger_.Save(job_.telemetry.state_dir);
  if (!s && !save_failed_) {
    save_failed_ = true;
    Log(LogLevel::kError, "event=run_record_write_failed error=" + Quote(s.error().message));
  } else if (s && save_failed_) {
    save_failed_ = false;
    Log(LogLevel::kInfo, "event=run_record_write_recovered");
  }
}

void RunRecord::AttemptEnded(const state::AttemptRecord& record) {
  attempts_.push_back(record);
  FoldOldest(ledger_, attempts_, folded_, kAttemptsKept);
}

RunSummary RunRecord::Summary(const std::optional<state::AttemptRecord>& current) const {
  RunLedger view = ledger_;
  if (!view.sessions.empty() && !view.sessions.back().ended_ms)
    view.sessions.back().last_seen_ms = UnixMillis(clock_.WallNow());
  return Summarize(view, attempts_, UnixMillis(clock_.WallNow()), current, folded_);
}

void RunRecord::AddInstanceFacts(const preemption::InstanceFacts& f) {
  auto& h = ledger_.host;
  if (!f.instance_type.empty()) h.instance_type = f.instance_type;
  if (!f.zone.empty()) h.zone = f.zone;
  if (!f.region.empty()) h.region = f.region;
  if (!f.instance_type.empty() || !f.zone.empty() || !f.region.empty()) h.source = "metadata service";
  Log(f.trouble.empty() ? LogLevel::kInfo : LogLevel::kWarning,
      "event=instance_facts instance_type=" + Quote(h.instance_type) + " zone=" + Quote(h.zone) +
          " region=" + Quote(h.region) + (f.trouble.empty() ? "" : " unanswered=" + Quote(f.trouble)));
  Save();
}

}  // namespace spotvisor::telemetry

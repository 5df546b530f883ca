// The preflight rules; see checks.hpp.
#include "spotvisor/preflight/checks.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>

#include "spotvisor/preemption/warning_window.hpp"

namespace spotvisor::preflight {
namespace {

std::string Seconds1(double s) {
  char buf[32];
  std::snprintf(buf, sizeof buf, s < 10 ? "%.1f s" : "%.0f s", s);
  return buf;
}

}  // namespace

std::string FormatLine(const CheckLine& line) {
  const char* status = line.status == CheckStatus::kOk ? "ok  " : line.status == CheckStatus::kWarn ? "WARN" : "FAIL";
  std::string name = line.name;
  name.resize(std::max<std::size_t>(name.size(), 9), ' ');
  return std::string(status) + "  " + name + line.text;
}

CheckLine EvaluateDiskSpace(const std::string& dir, std::uint64_t free_bytes, int keep,
                            const std::optional<SizeEstimate>& size) {
  CheckLine line{"disk", CheckStatus::kOk, ""};
  const std::string free_text = FormatSize(free_bytes) + " free in " + dir;
  if (!size || size->bytes == 0) {
    line.status = CheckStatus::kWarn;
    line.text = free_text + "; no checkpoint size known (none written yet; pass --checkpoint-size)";
    return line;
  }
  const std::uint64_t slots = keep > 0 ? static_cast<std::uint64_t>(keep) + 1 : 2;
  const std::uint64_t need = slots * size->bytes;
  line.text = free_text + "; need " + FormatSize(need) + " = " + std::to_string(slots) + " × " +
              FormatSize(size->bytes) + " (" + size->source + ")" +
              (keep > 0 ? ", checkpoints.keep " + std::to_string(keep) + " + 1 being written" : "");
  if (free_bytes < need) {
    line.status = CheckStatus::kFail;
    line.text += ": does not fit";
  } else if (keep == 0) {
    line.status = CheckStatus::kWarn;
    line.text += "; checkpoints.keep is 0 (keep all): the disk fills up over time";
  }
  return line;
}

CheckLine EvaluateWriteSpeed(double rate, const std::optional<SizeEstimate>& size, const std::string& provider,
                             const config::JobConfig& job, const std::string& measured) {
  CheckLine line{"write", CheckStatus::kOk, "write " + FormatRate(rate) + " (" + measured + ")"};
  const Duration window = preemption::WarningWindow(provider, job.provider);
  const Duration usable = std::max(Duration(0), std::min(window - job.provider.safety_margin, job.signals.grace));
  const double window_s = std::chrono::duration<double>(window).count();
  const double usable_s = std::chrono::duration<double>(usable).count();
  if (!size || size->bytes == 0) {
    line.status = CheckStatus::kWarn;
    line.text += "; no checkpoint size known, so no verdict against the " + provider + " warning window (" +
                 Seconds1(window_s) + "); pass --checkpoint-size";
    return line;
  }
  const double takes = rate > 0 ? static_cast<double>(size->bytes) / rate : INFINITY;
  line.text += " → a " + FormatSize(size->bytes) + " checkpoint (" + size->source + ") takes ≈ " +
               (std::isfinite(takes) ? Seconds1(takes) : std::string("forever")) + " here; the " + provider +
               " warning window is " + Seconds1(window_s) + ", of which the trainer gets " + Seconds1(usable_s) +
               " (safety margin " + FormatDuration(job.provider.safety_margin) + ", signals.grace " +
               FormatDuration(job.signals.grace) + ")";
  if (!(takes <= usable_s)) {
    line.status = CheckStatus::kFail;
    line.text += ": it does not fit — use faster storage, smaller checkpoints, or rely on periodic checkpoints";
  } else if (takes > usable_s / 2) {
    line.status = CheckStatus::kWarn;
    line.text += ": it fits with little margin";
  }
  return line;
}

CheckLine EvaluateUpload(std::optional<double> rate, const std::string& rate_source,
                         const std::optional<SizeEstimate>& size, std::optional<Duration> save,
                         const std::string& provider, const config::JobConfig& job) {
  CheckLine line{"upload", CheckStatus::kOk, ""};
  const Duration window = preemption::WarningWindow(provider, job.provider);
  if (!rate) {
    line.status = CheckStatus::kWarn;
    line.text = "no upload rate known yet (the mirror measures one at its first upload): pass --assume-upload-rate";
    return line;
  }
  if (!size || size->bytes == 0) {
    line.status = CheckStatus::kWarn;
    line.text =
        "upload " + FormatRate(*rate) + " (" + rate_source + "); no checkpoint size known: pass --checkpoint-size";
    return line;
  }
  const auto plan = mirror::PlanDurability(window, save, size->bytes, *rate);
  const double margin_s = std::chrono::duration<double>(plan.margin).count();
  line.text = "upload " + FormatRate(*rate) + " (" + rate_source + ") → a " + FormatSize(size->bytes) +
              " checkpoint (" + size->source + ") is durable ≈ " +
              Seconds1(std::chrono::duration<double>(window - plan.margin).count()) + " after a notice (save " +
              (save ? Seconds1(std::chrono::duration<double>(*save).count()) : std::string("not measured yet")) +
              " + upload " + Seconds1(std::chrono::duration<double>(plan.upload).count()) + "); the " + provider +
              " warning window is " + Seconds1(std::chrono::duration<double>(window).count());
  if (!plan.fits()) {
    line.status = CheckStatus::kFail;
    line.text += ": it does not fit by " + Seconds1(-margin_s) + " — " + plan.Advice();
  } else if (plan.margin < window / 4) {
    line.status = CheckStatus::kWarn;
    line.text += ": it fits with " + Seconds1(margin_s) + " to spare";
  }
  return line;
}

}  // namespace spotvisor::preflight

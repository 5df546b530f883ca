// Facts about the machine and the job that the report and the info metric carry: host
// and provider, machine boot time, the effective config's hash, fingerprints of the
// environment files (lock file, image digest). Blocking reads of small files; any thread.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "spotvisor/config/job_config.hpp"
#include "spotvisor/telemetry/run_ledger.hpp"

namespace spotvisor::telemetry {

HostInfo DescribeHost(const config::JobConfig& job);

// Unix ms of the machine's boot (the btime line of /proc/stat); nullopt when unreadable.
std::optional<std::int64_t> BootTimeMs();

// "xxh3-128:<hex>" of the effective configuration as --print-config shows it (secrets redacted).
std::string ConfigHash(const config::JobConfig& job);

// One entry per telemetry.fingerprint_files path; files over 256 MiB are not hashed.
std::vector<Fingerprint> FingerprintFiles(const std::vector<std::filesystem::path>& files);

}  // namespace spotvisor::telemetry

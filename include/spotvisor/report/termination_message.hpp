// The termination message: one JSON line of at most 4 KiB that `spotvisor run` leaves at
// exit where telemetry.termination_log says (Kubernetes reads /dev/termination-log into
// the pod's status). Built from the state dir like the run report, so both agree.
// TerminationMessage is pure; the writer and the observer block briefly, io thread at exit.
#pragma once

#include <cstddef>
#include <filesystem>
#include <memory>
#include <nlohmann/json_fwd.hpp>
#include <string>

#include "spotvisor/config/job_config.hpp"
#include "spotvisor/supervisor/run_observer.hpp"
#include "spotvisor/util/result.hpp"

namespace spotvisor::report {

inline constexpr std::size_t kTerminationMessageLimit = 4096;  // the kubelet's limit, bytes

// The line (with its '\n'), never longer than `limit` bytes: string fields are shortened
// (at a UTF-8 boundary, marked with "...") and, failing that, fields dropped, "why" and
// "exit_code" last. `report` is BuildReport's JSON (may be null: only code and why);
// `checkpoint` the newest good checkpoint's name ("" = none).
std::string TerminationMessage(int exit_code, const std::string& why, const nlohmann::json& report,
                               const std::string& checkpoint, std::size_t limit = kTerminationMessageLimit);

// Plain open + write + close, O_TRUNC, no rename: the path may be a file the container
// runtime bind-mounted (/dev/termination-log). The error names the path.
Status WriteTerminationLog(const std::filesystem::path& path, const std::string& text);

// Writes the message at OnExit. Register it after the telemetry observers (they save
// run.json first). Null when telemetry.termination_log is unset.
std::unique_ptr<supervisor::RunObserver> MakeTerminationLogObserver(const config::JobConfig& job);

}  // namespace spotvisor::report

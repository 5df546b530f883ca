// `spotvisor preflight`: check the machine and storage before renting hours — disk space,
// write speed and save + upload to the mirror against the warning window, the metadata endpoint, the GPU. One line per
// check; exit 0 when none failed, 1 otherwise.
#include <cstdio>
#include <memory>

#include "commands.hpp"
#include "job_options.hpp"
#include "spotvisor/cli/app.hpp"
#include "spotvisor/preflight/preflight.hpp"

namespace spotvisor::cli {
namespace {

struct PreflightFlags {
  JobOptions job;
  std::string write_size = "256MiB";
  std::string checkpoint_size;  // empty: the last one seen
  std::string assume_rate;      // empty: measure
  std::string assume_upload;    // empty: the mirror's last measured rate
  bool no_endpoint = false;
};

}  // namespace

void AddPreflightCommand(CLI::App& app, int& exit_code) {
  auto f = std::make_shared<PreflightFlags>();
  CLI::App* cmd = app.add_subcommand(
      "preflight", "Check disk space, write and upload speed vs the warning window, endpoint and GPU");
  cmd->footer(
      "Example:\n  spotvisor preflight --config job.yaml --checkpoint-size 12GiB\n"
      "Exit codes: 0 every check passed (warnings allowed), 1 a check failed, 64 usage, 78 configuration error.");
  AddJobOptions(*cmd, f->job, /*with_command=*/false);
  cmd->add_option("--write-size", f->write_size, "Bytes to write (with fsync) for the speed test (default 256MiB)");
  cmd->add_option("--checkpoint-size", f->checkpoint_size,
                  "Expected checkpoint size (default: the last one recorded, else the newest on disk)");
  cmd->add_option("--assume-write-rate", f->assume_rate,
                  "Skip the measurement; plan with this rate per second, e.g. 50MiB");
  cmd->add_option("--assume-upload-rate", f->assume_upload,
                  "Plan the mirror's upload with this rate per second, e.g. 20MiB (default: the last one measured)");
  cmd->add_flag("--no-endpoint", f->no_endpoint, "Skip the metadata endpoint check");
  cmd->callback([f, &exit_code] {
    auto job = LoadJobOrExit(f->job, /*require_command=*/false, exit_code);
    if (!job) return;
    preflight::PreflightOptions o;
    o.probe_endpoint = !f->no_endpoint;
    for (auto [text, flag, out] :
         {std::tuple{&f->write_size, "--write-size", 0}, std::tuple{&f->checkpoint_size, "--checkpoint-size", 1},
          std::tuple{&f->assume_rate, "--assume-write-rate", 2},
          std::tuple{&f->assume_upload, "--assume-upload-rate", 3}}) {
      if (text->empty()) continue;
      auto size = ParseSize(*text);
      if (!size) {
        std::fprintf(stderr, "spotvisor: %s: %s\n", flag, size.error().message.c_str());
        exit_code = exit_code::kUsage;
        return;
      }
      if (out == 0) o.write_size = *size;
      else if (out == 1) o.checkpoint_size = *size;
      else if (out == 2) o.assumed_rate = static_cast<double>(*size);
      else o.assumed_upload_rate = static_cast<double>(*size);
    }
    bool failed = false;
    for (const auto& line : preflight::RunPreflight(*job, o)) {
      std::printf("%s\n", preflight::FormatLine(line).c_str());
      failed = failed || line.status == preflight::CheckStatus::kFail;
    }
    exit_code = failed ? exit_code::kFailed : exit_code::kDone;
  });
}

}  // namespace spotvisor::cli

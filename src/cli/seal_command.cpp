// `spotvisor seal PATH...`: writes spotvisor.manifest.json (sizes + XXH3-128 of every
// file) into a checkpoint directory, or X.spotvisor.manifest.json next to a file X,
// atomically, so that later corruption is detectable.
#include <cstdio>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "commands.hpp"
#include "job_options.hpp"
#include "spotvisor/checkpoint/hash_pool.hpp"
#include "spotvisor/checkpoint/manifest.hpp"
#include "spotvisor/cli/app.hpp"

namespace spotvisor::cli {
namespace {

struct SealOptions {
  JobOptions job;                  // accepted for symmetry; sealing needs no job settings
  std::vector<std::string> paths;  // checkpoints to seal
};

}  // namespace

void AddSealCommand(CLI::App& app, int& exit_code) {
  auto o = std::make_shared<SealOptions>();
  CLI::App* cmd = app.add_subcommand("seal", "Write a manifest (sizes + XXH3-128 hashes) for checkpoints");
  cmd->footer(
      "Example:\n  spotvisor seal ckpt/checkpoint-500\n"
      "Exit codes: 0 sealed, 1 a checkpoint could not be sealed, 64 usage, 78 configuration error.");
  AddJobOptions(*cmd, o->job, /*with_command=*/false);
  cmd->add_option("--dir", o->job.checkpoint_dir, "checkpoints.dir (same as --checkpoint-dir)");
  cmd->add_option("paths", o->paths, "Checkpoint files or directories")->required();
  cmd->callback([o, &exit_code] {
    if (!LoadJobOrExit(o->job, /*require_command=*/false, exit_code)) return;
    exit_code = exit_code::kDone;
    for (const auto& p : o->paths) {
      auto path = std::filesystem::absolute(p).lexically_normal();
      if (!path.has_filename()) path = path.parent_path();  // "ckpt/" -> "ckpt"
      auto written = checkpoint::SealCheckpoint(path, &checkpoint::HashPool::Shared());
      if (!written) {
        std::fprintf(stderr, "spotvisor: %s\n", written.error().message.c_str());
        exit_code = exit_code::kFailed;
        continue;
      }
      std::printf("%s\n", written->c_str());
    }
  });
}

}  // namespace spotvisor::cli

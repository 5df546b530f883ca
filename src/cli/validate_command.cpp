// `spotvisor validate PATH...`: validates each checkpoint (file or directory) at the
// job's level or --level, and explains every failure (file, entry, offset). Changes nothing.
#include <cstdio>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "commands.hpp"
#include "job_options.hpp"
#include "spotvisor/checkpoint/hash_pool.hpp"
#include "spotvisor/checkpoint/validator.hpp"
#include "spotvisor/cli/app.hpp"

namespace spotvisor::cli {
namespace {

struct ValidateOptions {
  JobOptions job;                  // format, marker, level from the job (if any)
  std::vector<std::string> paths;  // checkpoints to validate
  std::string level;               // --level overrides checkpoints.validate
  std::string content;             // --content overrides checkpoints.content
};

}  // namespace

void AddValidateCommand(CLI::App& app, int& exit_code) {
  auto o = std::make_shared<ValidateOptions>();
  CLI::App* cmd = app.add_subcommand("validate", "Validate checkpoints and explain every failure (changes nothing)");
  cmd->footer(
      "Examples:\n  spotvisor validate ckpt/step_100.pt\n  spotvisor validate --level format ckpt/checkpoint-*\n"
      "Exit codes: 0 all good, 1 some bad, 64 usage, 78 configuration error.");
  AddJobOptions(*cmd, o->job, /*with_command=*/false);
  cmd->add_option("--dir", o->job.checkpoint_dir, "checkpoints.dir (same as --checkpoint-dir)");
  cmd->add_option("paths", o->paths, "Checkpoint files or directories")->required();
  cmd->add_option("--level", o->level, "structure | format | full (default: checkpoints.validate, full)")
      ->check(CLI::IsMember({"structure", "format", "full"}));
  cmd->add_option("--content", o->content,
                  "off | finite: no NaN or Inf in any floating-point tensor (default: checkpoints.content, off)")
      ->check(CLI::IsMember({"off", "finite"}));
  cmd->callback([o, &exit_code] {
    auto job = LoadJobOrExit(o->job, /*require_command=*/false, exit_code);
    if (!job) return;
    checkpoint::ValidatorOptions v = checkpoint::ValidatorOptionsFor(job->checkpoints);
    if (!o->level.empty()) v.level = *checkpoint::ParseLevel(o->level);
    if (!o->content.empty())
      v.content = o->content == "finite" ? config::ContentCheck::kFinite : config::ContentCheck::kOff;
    if (v.content == config::ContentCheck::kFinite && v.level == config::ValidateLevel::kStructure) {
      std::fprintf(stderr,
                   "spotvisor: --content finite reads every tensor; --level structure reads none: "
                   "use --level format or full\n");
      exit_code = exit_code::kUsage;
      return;
    }
    v.pool = &checkpoint::HashPool::Shared();
    bool all_good = true;
    for (const auto& p : o->paths) {
      auto path = std::filesystem::absolute(p).lexically_normal();
      if (!path.has_filename()) path = path.parent_path();  // "ckpt/" -> "ckpt"
      v.root = path.parent_path();
      const auto verdict = checkpoint::ValidateCheckpoint(path, v);
      all_good = all_good && verdict.good;
      std::printf("%s: %s (%s): %s\n", p.c_str(), verdict.good ? "good" : "BAD",
                  std::string(checkpoint::LevelName(v.level)).c_str(), verdict.reason.c_str());
    }
    exit_code = all_good ? exit_code::kDone : exit_code::kFailed;
  });
}

}  // namespace spotvisor::cli

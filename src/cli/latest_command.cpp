// `spotvisor latest`: the newest good checkpoint's path on stdout, exactly as {checkpoint}
// expands (checkpoints.dir joined with the name), for shell scripts. Validates the
// candidates now (newest first); changes nothing (a fixed name's kept version is put back
// only by `run`, so the path is the fixed name's when the file in place is good); never names a fenced checkpoint (one
// written by an epoch the group had left: fence.hpp). Exit 1 when there is none.
#include <cstdio>
#include <memory>
#include <vector>

#include "commands.hpp"
#include "job_options.hpp"
#include "spotvisor/checkpoint/catalog.hpp"
#include "spotvisor/cli/app.hpp"

namespace spotvisor::cli {

void AddLatestCommand(CLI::App& app, int& exit_code) {
  auto o = std::make_shared<JobOptions>();
  CLI::App* cmd = app.add_subcommand("latest", "Print the path of the newest good checkpoint (changes nothing)");
  cmd->footer(
      "Example:\n  ckpt=$(spotvisor latest --dir /ckpt --pattern 'step_{step}.pt') && resume \"$ckpt\"\n"
      "Exit codes: 0 found (path on stdout), 1 none, 64 usage, 78 configuration error.");
  AddJobOptions(*cmd, *o, /*with_command=*/false);
  cmd->add_option("--dir", o->checkpoint_dir, "checkpoints.dir (same as --checkpoint-dir)");
  cmd->callback([o, &exit_code] {
    auto job = LoadJobOrExit(*o, /*require_command=*/false, exit_code);
    if (!job) return;
    auto catalog = checkpoint::Catalog::FromConfig(*job);
    if (!catalog) {
      exit_code = ConfigError(catalog.error().message);
      return;
    }
    auto selection = catalog->Select(/*act=*/false);
    if (!selection) {
      std::fprintf(stderr, "spotvisor: %s\n", selection.error().message.c_str());
      exit_code = exit_code::kFailed;
      return;
    }
    for (const auto& r : selection->rejected) {
      std::fprintf(stderr, "spotvisor: skipped %s: %s\n", r.path.c_str(), r.reason.c_str());
    }
    if (!selection->chosen) {
      std::fprintf(stderr, "spotvisor: no good checkpoint in %s\n", catalog->options().dir.c_str());
      const auto* versions = catalog->versions();
      if (const auto kept = versions ? versions->List() : std::vector<versions::KeptVersion>{}; !kept.empty()) {
        std::fprintf(stderr, "spotvisor: the newest kept version is %s; `spotvisor run` puts it back in place\n",
                     kept.front().path.c_str());
      }
      exit_code = exit_code::kFailed;
      return;
    }
    std::printf("%s\n", selection->chosen->path.c_str());
    exit_code = exit_code::kDone;
  });
}

}  // namespace spotvisor::cli

// Builds the CLI11 app, runs the chosen subcommand and maps every failure to a documented
// exit code. The only place where exceptions from our dependencies are caught for users.
#include "spotvisor/cli/app.hpp"

#include <cstdio>
#include <exception>
#include <string>

#include "commands.hpp"

namespace spotvisor::cli {

int Main(int argc, char** argv) {
  CLI::App app{"spotvisor — supervise training jobs on spot/preemptible GPUs without losing work", "spotvisor"};
  app.set_version_flag("--version", std::string("spotvisor ") + SPOTVISOR_VERSION + " (commit " + SPOTVISOR_COMMIT +
                                        ", build " + SPOTVISOR_BUILD_TYPE + ")");
  app.require_subcommand(1);
  int exit_code = exit_code::kDone;
  AddRunCommand(app, exit_code);
  AddDrillCommand(app, exit_code);
  AddMockMetadataCommand(app, exit_code);
  AddCheckpointsCommand(app, exit_code);
  AddLatestCommand(app, exit_code);
  AddValidateCommand(app, exit_code);
  AddSealCommand(app, exit_code);
  AddReportCommand(app, exit_code);
  AddPreflightCommand(app, exit_code);
  AddStatusCommand(app, exit_code);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    const int rc = app.exit(e);  // prints help/version or the usage message
    return rc == 0 ? exit_code::kDone : exit_code::kUsage;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "spotvisor: internal error: %s\n", e.what());
    return exit_code::kFailed;
  }
  return exit_code;
}

}  // namespace spotvisor::cli

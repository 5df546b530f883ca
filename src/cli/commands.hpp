// Private to src/cli/: each subcommand lives in its own <name>_command.cpp and registers
// itself on the CLI11 app through one of these. A command's callback stores its exit code
// in `exit_code`; it never throws to the user and never prints a stack trace.
#pragma once

#include <CLI/CLI.hpp>

namespace spotvisor::cli {

void AddRunCommand(CLI::App& app, int& exit_code);
void AddDrillCommand(CLI::App& app, int& exit_code);
void AddCheckpointsCommand(CLI::App& app, int& exit_code);
void AddLatestCommand(CLI::App& app, int& exit_code);
void AddValidateCommand(CLI::App& app, int& exit_code);
void AddSealCommand(CLI::App& app, int& exit_code);
void AddMockMetadataCommand(CLI::App& app, int& exit_code);
void AddReportCommand(CLI::App& app, int& exit_code);
void AddPreflightCommand(CLI::App& app, int& exit_code);
void AddStatusCommand(CLI::App& app, int& exit_code);

}  // namespace spotvisor::cli

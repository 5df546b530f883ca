// Private to src/cli/: each subcommand lives in its own <name>_command.cpp and registers
// itself on the CLI11 app through one of these. A command's callback stores its exit code
// in `exit_code`; it never throws to the user and never prints a stack trace.
#pragma once

#include <CLI/CLI.hpp>

namespace spotvisor::cli {

void AddRunCommand(CLI::App& app, int& exit_code);

}  // namespace spotvisor::cli

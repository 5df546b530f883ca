// The command line: one subcommand per file in src/cli/, registered in app.cpp. main()
// calls Main and returns what it returns; nothing else runs before it.
#pragma once

#include "spotvisor/supervisor/outcome.hpp"

namespace spotvisor::cli {

// Exit codes, as the core defines them (supervisor/outcome.hpp); ints for main().
namespace exit_code {
using supervisor::Code;
using supervisor::ExitCode;
inline constexpr int kDone = Code(ExitCode::kDone);
inline constexpr int kFailed = Code(ExitCode::kFailed);  // also "the answer is no"
inline constexpr int kBudget = Code(ExitCode::kBudget);
inline constexpr int kUsage = Code(ExitCode::kUsage);
inline constexpr int kLocked = Code(ExitCode::kLocked);
inline constexpr int kStopped = Code(ExitCode::kStopped);
inline constexpr int kConfig = Code(ExitCode::kConfig);
}  // namespace exit_code

int Main(int argc, char** argv);

}  // namespace spotvisor::cli

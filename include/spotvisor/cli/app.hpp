// The command line: one subcommand per file in src/cli/, registered in app.cpp. main()
// calls Main and returns what it returns; nothing else runs before it.
#pragma once

namespace spotvisor::cli {

// Exit codes of `spotvisor run` (MISSION.md; systemd unit and users' scripts rely on them)
// and, for the other subcommands, 0 = yes, 1 = no, 64 = usage, 78 = config.
namespace exit_code {
inline constexpr int kDone = 0;
inline constexpr int kFailed = 1;         // also "the answer is no"
inline constexpr int kBudget = 3;
inline constexpr int kUsage = 64;
inline constexpr int kLocked = 73;
inline constexpr int kStopped = 75;
inline constexpr int kConfig = 78;
}  // namespace exit_code

int Main(int argc, char** argv);

}  // namespace spotvisor::cli

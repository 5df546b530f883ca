// How an attempt ended and how spotvisor exits: the core's words for them. The CLI and the
// journal take their spellings from here (MISSION.md; the systemd unit and users' scripts
// rely on the codes). Pure; any thread.
#pragma once

#include <optional>
#include <string_view>

namespace spotvisor::supervisor {

enum class Outcome {
  kDone,         // a success code, no stop asked
  kFailed,       // exited on its own otherwise
  kStopped,      // stopped for SIGTERM/SIGINT
  kPreempted,    // stopped for a notice
  kHang,         // stopped for a hang
  kBudget,       // stopped for the cost budget
  kSpawnFailed,  // could not be started
  kPeerStopped,  // stopped because another node of the group stopped (multi-node)
};

// "done", "failed", "stopped", "preempted", "hang", "budget", "spawn-failed", "peer-stopped":
// the journal's words.
std::string_view ToString(Outcome outcome);
std::optional<Outcome> ParseOutcome(std::string_view text);

// Exit codes of `spotvisor run`; the other subcommands use 0 = yes, 1 = no, 64, 78.
enum class ExitCode : int {
  kDone = 0,
  kFailed = 1,  // also "the answer is no"
  kBudget = 3,
  kUsage = 64,
  kLocked = 73,
  kStopped = 75,  // resumable
  kConfig = 78,
};

constexpr int Code(ExitCode code) { return static_cast<int>(code); }

}  // namespace spotvisor::supervisor

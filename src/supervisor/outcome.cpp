// Outcome words; see outcome.hpp.
#include "spotvisor/supervisor/outcome.hpp"

#include <array>
#include <utility>

namespace spotvisor::supervisor {
namespace {

constexpr std::array<std::pair<Outcome, std::string_view>, 8> kWords{{
    {Outcome::kDone, "done"},
    {Outcome::kFailed, "failed"},
    {Outcome::kStopped, "stopped"},
    {Outcome::kPreempted, "preempted"},
    {Outcome::kHang, "hang"},
    {Outcome::kBudget, "budget"},
    {Outcome::kSpawnFailed, "spawn-failed"},
    {Outcome::kPeerStopped, "peer-stopped"},
}};

}  // namespace

std::string_view ToString(Outcome outcome) {
  for (const auto& [o, word] : kWords) {
    if (o == outcome) return word;
  }
  return "failed";
}

std::optional<Outcome> ParseOutcome(std::string_view text) {
  for (const auto& [o, word] : kWords) {
    if (word == text) return o;
  }
  return std::nullopt;
}

}  // namespace spotvisor::supervisor

// How long a preemption notice leaves the trainer to save: the window up to the deadline
// (provider.default_window when the notice has none) less provider.safety_margin, and at
// least provider.min_grace, so that a deadline already past (a skewed clock, a late poll)
// still gets a save attempt. The Fsm caps signals.grace with it. Pure; any thread.
#pragma once

#include <chrono>
#include <optional>

#include "spotvisor/config/job_config.hpp"

namespace spotvisor::supervisor {

struct NoticeGrace {
  std::chrono::milliseconds window{0};  // until the deadline (or the default window)
  std::chrono::milliseconds cap{0};     // what the trainer gets at most
  bool deadline_near = false;           // the window left less than min_grace: cap = min_grace
};

NoticeGrace GraceForNotice(std::optional<std::chrono::milliseconds> until_deadline, const config::ProviderSection& p);

}  // namespace spotvisor::supervisor

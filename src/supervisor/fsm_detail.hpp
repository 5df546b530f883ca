// Private to src/supervisor/: the small helpers both halves of the Fsm use (fsm.cpp: start,
// selection, attempts, backoff; fsm_stop.cpp: stops, timers, a launcher's workers). Pure.
#pragma once

#include <chrono>
#include <string>

#include "spotvisor/supervisor/fsm.hpp"

namespace spotvisor::supervisor::fsm_detail {

inline LogAction Note(LogLevel level, std::string text) { return LogAction{level, std::move(text)}; }

inline const char* ReasonName(StopReason r) {
  switch (r) {
    case StopReason::kSignal:
      return "signal";
    case StopReason::kNotice:
      return "notice";
    case StopReason::kHang:
      return "hang";
    case StopReason::kBudget:
      return "budget";
    case StopReason::kPeer:
      return "peer";
    case StopReason::kNone:
      break;
  }
  return "none";
}

// Which of two stops that came before the trainer started wins: a signal (exit 75), the
// budget (exit 3), a notice (drain), a hang (nothing to stop yet).
inline int Precedence(StopReason r) {
  switch (r) {
    case StopReason::kSignal:
      return 4;
    case StopReason::kBudget:
      return 3;
    case StopReason::kNotice:
      return 2;
    case StopReason::kHang:
      return 1;
    case StopReason::kPeer:  // never pending: a peer's stop only stops a running trainer
    case StopReason::kNone:
      break;
  }
  return 0;
}

}  // namespace spotvisor::supervisor::fsm_detail

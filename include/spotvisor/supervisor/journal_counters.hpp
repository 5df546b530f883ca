// The Fsm's counters to and from the job journal, pure (the driver's only; public so that
// the unit tests reach it). The clocks are arguments: the journal keeps unix ms, the Fsm steady time.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "spotvisor/state/journal.hpp"
#include "spotvisor/supervisor/fsm.hpp"

namespace spotvisor::supervisor {

// The counters a new supervisor starts with: state.json, plus attempts that only
// attempts.jsonl knows (state.json is fsynced at exit only; after a power cut the journal
// may know more, and a crash never hands a budget back).
Counters RestoreCounters(const state::PersistedState& saved, const std::vector<state::AttemptRecord>& attempts,
                         std::int64_t now_ms, TimePoint now);

// `counters` written into `state` (the driver's own parts of it untouched).
void StoreCounters(const Counters& counters, std::int64_t now_ms, TimePoint now, state::PersistedState& state);

// True when writing `next` over `saved` would change nothing worth a write: phases other
// than running, drained and finished are not worth one of their own.
bool SameForTheJournal(const state::PersistedState& next, const state::PersistedState& saved);

}  // namespace spotvisor::supervisor

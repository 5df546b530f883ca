// The Fsm's counters to and from the journal; see journal_counters.hpp.
#include "spotvisor/supervisor/journal_counters.hpp"

#include <algorithm>

namespace spotvisor::supervisor {
namespace {

// Phases worth a write of their own: a restarted supervisor (or a drill) reads them.
bool Persistent(const std::string& phase) {
  return phase == "running" || phase == "drained" || phase == "spare" || phase == "finished";
}

std::string ChildKey(const state::PersistedState& s) {
  return s.child ? std::to_string(s.child->pid) + ":" + std::to_string(s.child->start_ticks) : std::string();
}

// The counts both sides keep under the same names (recent failures differ in kind).
template <class From, class To>
void CopyCounts(const From& f, To& t) {
  t.attempts = f.attempts;
  t.failures = f.failures;
  t.hangs = f.hangs;
  t.preemptions = f.preemptions;
  t.consecutive_failures = f.consecutive_failures;
  t.no_progress_streak = f.no_progress_streak;
  t.last_resume_step = f.last_resume_step;
}

}  // namespace

Counters RestoreCounters(const state::PersistedState& s, const std::vector<state::AttemptRecord>& attempts,
                         std::int64_t now_ms, TimePoint now) {
  Counters c;
  CopyCounts(s, c);
  for (auto ms : s.recent_failures_ms) c.recent_failures.push_back(now - std::chrono::milliseconds(now_ms - ms));
  int last = 0;
  for (const auto& r : attempts) {
    if (r.attempt >= last) {
      last = r.attempt;
      const auto ended = ParseOutcome(r.outcome);
      c.last_attempt_failed = ended == Outcome::kFailed || ended == Outcome::kSpawnFailed || ended == Outcome::kHang;
    }
    if (r.attempt <= s.attempts) continue;
    c.attempts = std::max(c.attempts, r.attempt);
    const auto outcome = ParseOutcome(r.outcome);
    if (outcome == Outcome::kFailed || outcome == Outcome::kSpawnFailed) ++c.failures, ++c.consecutive_failures;
    if (outcome == Outcome::kHang) ++c.hangs;
    if (outcome == Outcome::kPreempted) ++c.preemptions;
  }
  return c;
}

void StoreCounters(const Counters& c, std::int64_t now_ms, TimePoint now, state::PersistedState& s) {
  CopyCounts(c, s);
  s.recent_failures_ms.clear();
  for (auto t : c.recent_failures) {
    s.recent_failures_ms.push_back(now_ms - std::chrono::duration_cast<std::chrono::milliseconds>(now - t).count());
  }
}

bool SameForTheJournal(const state::PersistedState& a, const state::PersistedState& b) {
  return a.attempts == b.attempts && a.failures == b.failures && a.hangs == b.hangs && a.preemptions == b.preemptions &&
         a.consecutive_failures == b.consecutive_failures && a.no_progress_streak == b.no_progress_streak &&
         a.last_resume_step == b.last_resume_step && (a.phase == b.phase || !Persistent(a.phase)) &&
         ChildKey(a) == ChildKey(b) && a.last_exit_message == b.last_exit_message && a.last_epoch == b.last_epoch &&
         a.last_epoch_step == b.last_epoch_step;
}

}  // namespace spotvisor::supervisor

// Goodput in buckets: the billed time of a run split so that the parts add up to it. Per
// attempt (productive, lost, checkpointing, startup, the disrupted tail after a notice), per
// gap between attempts (disrupted after a crash or a notice, waiting for a group), and
// idle for the rest. Used by run_summary.cpp. Pure; any thread.
#pragma once

#include <cstdint>
#include <vector>

#include "spotvisor/state/journal.hpp"
#include "spotvisor/telemetry/run_ledger.hpp"
#include "spotvisor/telemetry/run_summary.hpp"

namespace spotvisor::telemetry {

// Billing intervals: a session on its own, or (billing from boot) every session of one
// boot merged into [boot, last end]; `now_ms` ends a session never refreshed.
std::vector<Interval> BillingIntervals(const RunLedger& ledger, std::int64_t now_ms);

// ms of [start, end) inside `intervals` (which do not overlap one another).
std::int64_t OverlapMs(std::int64_t start, std::int64_t end, const std::vector<Interval>& intervals);

// One attempt's time split: startup (start to first progress), then training split into
// productive, checkpointing (measured write time), lost (after the last kept checkpoint)
// and, for an attempt a stop notice ended, disrupted from the notice (or the save after it).
GoodputBuckets AttemptBuckets(const RunLedger& ledger, const state::AttemptRecord& attempt, bool running);

// The billed part of the gap after `ended` until `next_start_ms`, less the group's waiting
// in it: disrupted unless the attempt was done (then it is left to idle).
double DisruptedGapSeconds(const RunLedger& ledger, const state::AttemptRecord& ended, std::int64_t next_start_ms,
                           const std::vector<Interval>& billing);

// Adds the waiting time and sets idle to what is left of `billed_seconds`; if the measured
// buckets exceed the billed time (clocks, a lost session), they are scaled down to it.
void CloseBuckets(GoodputBuckets& buckets, const RunLedger& ledger, const std::vector<Interval>& billing,
                  double billed_seconds);

}  // namespace spotvisor::telemetry

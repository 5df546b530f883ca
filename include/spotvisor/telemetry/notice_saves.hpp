// Every notice to its durable checkpoint: which checkpoint a notice's stop produced, when it
// appeared, when it was judged good, when the mirror had it, and the notice's outcome (the
// deadline met or missed, or no new checkpoint at all). The telemetry observer feeds it the
// run's events; the report and the metrics read the results from the ledger. Pure; any
// thread.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "spotvisor/telemetry/run_ledger.hpp"

namespace spotvisor::telemetry {

// Seconds from the notice being seen to `ms` (3 decimals); nullopt without `ms`.
std::optional<double> AfterNotice(const NoticeRecord& notice, std::optional<std::int64_t> ms);

// A checkpoint verdict (already in the ledger): it is the save of every notice of its
// attempt seen before the checkpoint's newest file was written and not yet judged good (a
// good one replaces a corrupt one). Returns the notices it settled (judged good).
std::vector<std::size_t> MatchCheckpoint(RunLedger& ledger, const CheckpointRecord& checkpoint);

// An upload finished: the notices whose checkpoint is `name` get `ms` as mirrored_ms.
void MatchMirrored(RunLedger& ledger, const std::string& name, std::int64_t ms);

// A checkpoint that reached the mirror: its step, and when (unix ms).
struct DurableAt {
  std::uint64_t step = 0;
  std::int64_t at_ms = 0;
};

// The notices with a mirror and no durable_step yet whose deadline passed by `now_ms` (all of
// them with nullopt: the run ends) get the newest step of `durable` that was on the mirror
// by their deadline (by the run's end without one): the step a new VM resumes from. A notice
// keeps no durable_step when nothing was on the mirror.
void SettleDurable(RunLedger& ledger, const std::vector<DurableAt>& durable, std::optional<std::int64_t> now_ms);

// Steps a new VM loses to the notice: its checkpoint's step less durable_step (0 when its own
// checkpoint went up by the deadline; all of its steps when nothing was on the mirror);
// nullopt without a mirror or without a checkpoint of the notice's.
std::optional<std::uint64_t> StepsLostOnANewVm(const NoticeRecord& notice);

// Settles the notices still open whose attempt is over: of an attempt before `attempt`, or
// all with nullopt (the run ends). Returns the notices settled now.
std::vector<std::size_t> SettleOpen(RunLedger& ledger, std::optional<int> attempt);

// The `event=notice_saved` / `event=notice_not_saved` line of a settled notice.
std::string NoticeEventLine(const NoticeRecord& notice, std::optional<double> steps_lost);

}  // namespace spotvisor::telemetry

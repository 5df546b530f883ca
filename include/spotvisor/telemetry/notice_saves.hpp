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

// Settles the notices still open whose attempt is over: of an attempt before `attempt`, or
// all with nullopt (the run ends). Returns the notices settled now.
std::vector<std::size_t> SettleOpen(RunLedger& ledger, std::optional<int> attempt);

// The `event=notice_saved` / `event=notice_not_saved` line of a settled notice.
std::string NoticeEventLine(const NoticeRecord& notice, std::optional<double> steps_lost);

}  // namespace spotvisor::telemetry

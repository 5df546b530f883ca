// What the nodes of a multi-node job write to etcd, and the group's decision from it. Keys
// live under <coordination.prefix>/<job.name>/:
//   members/RRRR       this node holds rank R (under its lease): MemberRecord; said again (a
//                      second put) by a node that waits to join a shrunken group
//   spares/LLLLLLLLLLLLLLLLLLLL  a spare waits for a rank, under its lease L: MemberRecord
//   join/EEEEEEEEEEEE/RRRR  rank R waits to start epoch E with these good steps (its lease): JoinRecord
//   epoch              the newest epoch the group agreed on (decimal)
//   failures           the job's failures, all nodes together (decimal; raised by txn)
//   stop/EEEEEEEEEEEE  the first stop of epoch E, written once (txn): StopRecord
//   done/EEEEEEEEEEEE/RRRR  rank R's trainer succeeded in epoch E (its leaving is no loss)
//   shrink/EEEEEEEEEEEE  epoch E starts with these ranks only, fewer than `nodes` (txn, once): ShrinkRecord
// Numbers are zero-padded so that keys sort as numbers. Pure; any thread.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "spotvisor/util/result.hpp"

namespace spotvisor::coordination {

struct MemberRecord {
  std::string advertise;  // the address peers use for this node ({master_addr} when rank 0)
  std::string host;       // the host name, for people
  std::int64_t pid = 0;   // the supervisor's pid, with `since` what makes a record this process's own
  std::int64_t since_unix_ms = 0;
};

struct JoinRecord {
  std::vector<std::uint64_t> steps;  // this node's good checkpoint steps, newest first
};

struct StopRecord {
  int rank = 0;                       // who stopped first
  std::string why;                    // "notice: aws spot-itn", "trainer failed: exit code 1"
  std::int64_t deadline_unix_ms = 0;  // a notice's deadline (0: none): the peers' grace ends then too
};

// A group that shrank (coordination.min_nodes): the ranks that start epoch E, sorted. They
// train as places 0..n-1 in this order; rank ranks[0]'s node is the master.
struct ShrinkRecord {
  std::vector<int> ranks;
};

std::string Encode(const MemberRecord& r);
std::string Encode(const ShrinkRecord& r);
Result<ShrinkRecord> DecodeShrink(std::string_view json);
std::string Encode(const JoinRecord& r);
std::string Encode(const StopRecord& r);
Result<MemberRecord> DecodeMember(std::string_view json);
Result<JoinRecord> DecodeJoin(std::string_view json);
Result<StopRecord> DecodeStop(std::string_view json);

// "<prefix>/<job>/" and the keys under it.
std::string GroupPrefix(const std::string& prefix, const std::string& job);
std::string MemberKey(const std::string& base, int rank);
std::string SpareKey(const std::string& base, std::int64_t lease);
std::string JoinPrefix(const std::string& base, std::uint64_t epoch);
std::string JoinKey(const std::string& base, std::uint64_t epoch, int rank);
std::string EpochKey(const std::string& base);
std::string FailuresKey(const std::string& base);
std::string StopKey(const std::string& base, std::uint64_t epoch);
std::string DoneKey(const std::string& base, std::uint64_t epoch, int rank);
std::string ShrinkKey(const std::string& base, std::uint64_t epoch);

// A key under `base` taken apart: which record it is and its numbers.
struct ParsedKey {
  enum class Kind { kMember, kSpare, kJoin, kEpoch, kFailures, kStop, kDone, kShrink, kOther };
  Kind kind = Kind::kOther;
  int rank = -1;
  std::uint64_t epoch = 0;
  std::int64_t lease = 0;  // kSpare: the spare's lease
};
ParsedKey ParseKey(const std::string& base, std::string_view key);

// Every rank of `ranks` has joined epoch E: the newest step good on each of them, or none (a
// fresh start) when some node has no step the others have too.
bool GroupComplete(const std::map<int, JoinRecord>& joined, const std::vector<int>& ranks);
std::optional<std::uint64_t> AgreedStep(const std::map<int, JoinRecord>& joined, const std::vector<int>& ranks);
// The ranks 0..nodes-1, the whole group.
std::vector<int> AllRanks(int nodes);

// The lowest rank in 0..nodes-1 nobody holds, if any.
std::optional<int> LowestFreeRank(const std::map<int, MemberRecord>& members, int nodes);

// What etcd holds under the job's prefix, as records: `spotvisor status` reads it once, the
// coordinator keeps it current from its watch.
struct GroupView {
  std::map<int, MemberRecord> members;                       // rank -> holder
  std::map<std::int64_t, MemberRecord> spares;               // lease -> a spare waiting for a rank
  std::map<std::uint64_t, std::map<int, JoinRecord>> joins;  // epoch -> rank -> good steps
  std::map<std::uint64_t, StopRecord> stops;                 // epoch -> its first stop
  std::map<std::uint64_t, std::set<int>> done;               // epoch -> ranks whose trainer succeeded
  std::map<std::uint64_t, std::vector<int>> shrinks;         // epoch -> its ranks, when fewer than nodes
  std::uint64_t epoch = 0;                                   // the newest agreed epoch (0: none yet)
  int failures = 0;                                          // the job's failures, all nodes
  std::vector<std::string> unreadable;                       // ReadView: the keys Fold refused
};

// The ranks that start `epoch`: its shrink record's, or all `nodes`.
std::vector<int> EpochRanks(const GroupView& view, std::uint64_t epoch, int nodes);

// One put (`deleted` false) or delete of the key `key` names, folded into `view`. False when
// the key is none of ours or its value is not what spotvisor writes (the view is unchanged).
// A stop, a done or a shrink is never taken back: their deletes change nothing.
bool Fold(GroupView& view, const ParsedKey& key, std::string_view value, bool deleted);

// Everything under `base` at one revision.
struct KeyValueText {
  std::string key;
  std::string value;
};
GroupView ReadView(const std::string& base, const std::vector<KeyValueText>& pairs);

}  // namespace spotvisor::coordination

// The group's records and decisions; see records.hpp.
#include "spotvisor/coordination/records.hpp"

#include <algorithm>
#include <charconv>
#include <cstdint>
#include <cstdio>
#include <functional>
#include <iterator>
#include <nlohmann/json.hpp>
#include <set>

namespace spotvisor::coordination {
namespace {

using nlohmann::json;

std::string Pad(std::uint64_t n, int width) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%0*llu", width, static_cast<unsigned long long>(n));
  return buf;
}

template <class T>
Result<T> Parse(std::string_view text, const char* what, T (*read)(const json&)) {
  try {
    return read(json::parse(text));
  } catch (const json::exception& e) {
    return Error{std::string("etcd: a ") + what + " record that is not what spotvisor writes (" + e.what() + ")"};
  }
}

std::optional<std::uint64_t> Number(std::string_view text) {
  std::uint64_t n = 0;
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), n);
  if (ec != std::errc() || end != text.data() + text.size() || text.empty()) return std::nullopt;
  return n;
}

}  // namespace

std::string Encode(const MemberRecord& r) {
  return json{{"advertise", r.advertise}, {"host", r.host}, {"pid", r.pid}, {"since_unix_ms", r.since_unix_ms}}.dump();
}
std::string Encode(const JoinRecord& r) { return json{{"steps", r.steps}}.dump(); }
std::string Encode(const StopRecord& r) {
  return json{{"rank", r.rank}, {"why", r.why}, {"deadline_unix_ms", r.deadline_unix_ms}}.dump();
}

std::string Encode(const ShrinkRecord& r) { return json{{"ranks", r.ranks}}.dump(); }

Result<ShrinkRecord> DecodeShrink(std::string_view text) {
  auto r = Parse<ShrinkRecord>(text, "shrink",
                               [](const json& j) { return ShrinkRecord{j.at("ranks").get<std::vector<int>>()}; });
  if (!r) return r;
  const auto& ranks = r->ranks;
  const bool sorted = std::adjacent_find(ranks.begin(), ranks.end(), std::greater_equal<>()) == ranks.end();
  if (ranks.empty() || ranks.front() < 0 || !sorted)
    return Error{"etcd: a shrink record whose ranks are not a sorted list of distinct ranks"};
  return r;
}

Result<MemberRecord> DecodeMember(std::string_view text) {
  return Parse<MemberRecord>(text, "member", [](const json& j) {
    return MemberRecord{j.at("advertise").get<std::string>(), j.value("host", std::string()),
                        j.value("pid", std::int64_t{0}), j.value("since_unix_ms", std::int64_t{0})};
  });
}
Result<JoinRecord> DecodeJoin(std::string_view text) {
  return Parse<JoinRecord>(text, "join",
                           [](const json& j) { return JoinRecord{j.at("steps").get<std::vector<std::uint64_t>>()}; });
}
Result<StopRecord> DecodeStop(std::string_view text) {
  return Parse<StopRecord>(text, "stop", [](const json& j) {
    return StopRecord{j.at("rank").get<int>(), j.value("why", std::string()),
                      j.value("deadline_unix_ms", std::int64_t{0})};
  });
}

std::string GroupPrefix(const std::string& prefix, const std::string& job) {
  std::string base = prefix;
  if (base.empty() || base.back() != '/') base += '/';
  return base + job + "/";
}
std::string MemberKey(const std::string& base, int rank) { return base + "members/" + Pad(rank, 4); }
std::string SpareKey(const std::string& base, std::int64_t lease) {
  return base + "spares/" + Pad(static_cast<std::uint64_t>(lease), 20);
}
std::string JoinPrefix(const std::string& base, std::uint64_t epoch) { return base + "join/" + Pad(epoch, 12) + "/"; }
std::string JoinKey(const std::string& base, std::uint64_t epoch, int rank) {
  return JoinPrefix(base, epoch) + Pad(rank, 4);
}
std::string EpochKey(const std::string& base) { return base + "epoch"; }
std::string FailuresKey(const std::string& base) { return base + "failures"; }
std::string StopKey(const std::string& base, std::uint64_t epoch) { return base + "stop/" + Pad(epoch, 12); }
std::string DoneKey(const std::string& base, std::uint64_t epoch, int rank) {
  return base + "done/" + Pad(epoch, 12) + "/" + Pad(rank, 4);
}
std::string ShrinkKey(const std::string& base, std::uint64_t epoch) { return base + "shrink/" + Pad(epoch, 12); }

ParsedKey ParseKey(const std::string& base, std::string_view key) {
  ParsedKey p;
  if (key.substr(0, base.size()) != base) return p;
  key.remove_prefix(base.size());
  const auto take = [&key](std::string_view head) {
    if (key.substr(0, head.size()) != head) return false;
    key.remove_prefix(head.size());
    return true;
  };
  if (key == "epoch") {
    p.kind = ParsedKey::Kind::kEpoch;
  } else if (key == "failures") {
    p.kind = ParsedKey::Kind::kFailures;
  } else if (take("members/")) {
    if (auto r = Number(key); r && *r < 100000) p = {ParsedKey::Kind::kMember, static_cast<int>(*r), 0};
  } else if (take("spares/")) {
    if (auto l = Number(key); l && *l > 0 && *l <= static_cast<std::uint64_t>(INT64_MAX)) {
      p.kind = ParsedKey::Kind::kSpare;
      p.lease = static_cast<std::int64_t>(*l);
    }
  } else if (take("stop/")) {
    if (auto e = Number(key)) p = {ParsedKey::Kind::kStop, -1, *e};
  } else if (take("shrink/")) {
    if (auto e = Number(key)) p = {ParsedKey::Kind::kShrink, -1, *e};
  } else if (const bool join = take("join/"); join || take("done/")) {
    const auto slash = key.find('/');
    if (slash != std::string_view::npos) {
      auto e = Number(key.substr(0, slash));
      auto r = Number(key.substr(slash + 1));
      if (e && r && *r < 100000) p = {join ? ParsedKey::Kind::kJoin : ParsedKey::Kind::kDone, static_cast<int>(*r), *e};
    }
  }
  return p;
}

bool GroupComplete(const std::map<int, JoinRecord>& joined, const std::vector<int>& ranks) {
  if (ranks.empty()) return false;
  return std::all_of(ranks.begin(), ranks.end(), [&joined](int r) { return joined.count(r) != 0; });
}

std::optional<std::uint64_t> AgreedStep(const std::map<int, JoinRecord>& joined, const std::vector<int>& ranks) {
  if (!GroupComplete(joined, ranks)) return std::nullopt;
  const auto& first = joined.at(ranks.front()).steps;
  std::set<std::uint64_t> common(first.begin(), first.end());
  for (int rank : ranks) {
    const auto& record = joined.at(rank);
    const std::set<std::uint64_t> mine(record.steps.begin(), record.steps.end());
    std::set<std::uint64_t> both;
    std::set_intersection(common.begin(), common.end(), mine.begin(), mine.end(), std::inserter(both, both.end()));
    common = std::move(both);
  }
  if (common.empty()) return std::nullopt;
  return *common.rbegin();
}

std::vector<int> AllRanks(int nodes) {
  std::vector<int> ranks;
  for (int r = 0; r < nodes; ++r) ranks.push_back(r);
  return ranks;
}

std::vector<int> EpochRanks(const GroupView& view, std::uint64_t epoch, int nodes) {
  const auto it = view.shrinks.find(epoch);
  return it != view.shrinks.end() ? it->second : AllRanks(nodes);
}

std::optional<int> LowestFreeRank(const std::map<int, MemberRecord>& members, int nodes) {
  for (int r = 0; r < nodes; ++r) {
    if (members.count(r) == 0) return r;
  }
  return std::nullopt;
}

bool Fold(GroupView& view, const ParsedKey& key, std::string_view value, bool deleted) {
  switch (key.kind) {
    case ParsedKey::Kind::kMember:
      if (deleted) {
        view.members.erase(key.rank);
      } else if (auto m = DecodeMember(value)) {
        view.members[key.rank] = *m;
      } else {
        return false;
      }
      return true;
    case ParsedKey::Kind::kSpare:
      if (deleted) {
        view.spares.erase(key.lease);
      } else if (auto m = DecodeMember(value)) {
        view.spares[key.lease] = *m;
      } else {
        return false;
      }
      return true;
    case ParsedKey::Kind::kJoin:
      if (deleted) {
        if (auto it = view.joins.find(key.epoch); it != view.joins.end()) {
          it->second.erase(key.rank);
          if (it->second.empty()) view.joins.erase(it);
        }
      } else if (auto j = DecodeJoin(value)) {
        view.joins[key.epoch][key.rank] = *j;
      } else {
        return false;
      }
      return true;
    case ParsedKey::Kind::kStop:
      if (deleted) return true;
      if (auto st = DecodeStop(value)) {
        view.stops[key.epoch] = *st;
        return true;
      }
      return false;
    case ParsedKey::Kind::kShrink:
      if (deleted) return true;
      if (auto sh = DecodeShrink(value)) {
        view.shrinks[key.epoch] = sh->ranks;
        return true;
      }
      return false;
    case ParsedKey::Kind::kDone:
      if (!deleted) view.done[key.epoch].insert(key.rank);
      return true;
    case ParsedKey::Kind::kFailures:
      if (deleted) {
        view.failures = 0;
      } else if (auto n = Number(value); n && *n < 1000000000) {
        view.failures = static_cast<int>(*n);
      } else {
        return false;
      }
      return true;
    case ParsedKey::Kind::kEpoch:
      if (deleted) {
        view.epoch = 0;
      } else if (auto e = Number(value)) {
        view.epoch = *e;
      } else {
        return false;
      }
      return true;
    case ParsedKey::Kind::kOther:
      return false;
  }
  return false;
}

GroupView ReadView(const std::string& base, const std::vector<KeyValueText>& pairs) {
  GroupView view;
  for (const auto& kv : pairs) {
    if (!Fold(view, ParseKey(base, kv.key), kv.value, false)) view.unreadable.push_back(kv.key);
  }
  return view;
}

}  // namespace spotvisor::coordination

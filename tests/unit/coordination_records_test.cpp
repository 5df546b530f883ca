// The group's records and its decisions (records.hpp): what every node computes alike from
// what etcd holds. Pure.
#include <gtest/gtest.h>

#include <set>

#include "spotvisor/coordination/records.hpp"

namespace spotvisor::coordination {
namespace {

TEST(CoordinationRecords, TheNewestStepGoodOnEveryNodeIsAgreed) {
  std::map<int, JoinRecord> joined{{0, {{30, 20, 10}}}, {1, {{20, 10}}}, {2, {{30, 20}}}};
  EXPECT_EQ(AgreedStep(joined, AllRanks(3)), 20u);  // node 1 lacks 30 (node-local shards, issue 14 (e))
  joined[1] = JoinRecord{{30, 20, 10}};
  EXPECT_EQ(AgreedStep(joined, AllRanks(3)), 30u);
  joined[2] = JoinRecord{{}};
  EXPECT_EQ(AgreedStep(joined, AllRanks(3)), std::nullopt);  // a node with nothing: a fresh start
  joined = {{0, {{40}}}, {1, {{30}}}};
  EXPECT_EQ(AgreedStep(joined, AllRanks(2)), std::nullopt);  // nothing in common
}

TEST(CoordinationRecords, AShrunkenEpochAgreesAmongItsRanksOnly) {
  // Rank 1 is gone; its old join (no step 30) must not hold the others back.
  const std::map<int, JoinRecord> joined{{0, {{30, 20}}}, {1, {{20}}}, {2, {{30, 20}}}};
  EXPECT_EQ(AgreedStep(joined, {0, 2}), 30u);
  EXPECT_TRUE(GroupComplete(joined, {0, 2}));
  EXPECT_FALSE(GroupComplete({{0, {}}}, {0, 2}));
  EXPECT_EQ(AgreedStep({{0, {{30}}}}, {0, 2}), std::nullopt);  // incomplete: nothing agreed
}

TEST(CoordinationRecords, AShrinkRecordNamesTheEpochsRanksAndIsNeverTakenBack) {
  const std::string base = GroupPrefix("/spotvisor", "llama");
  EXPECT_EQ(ShrinkKey(base, 4), "/spotvisor/llama/shrink/000000000004");
  const ParsedKey key = ParseKey(base, ShrinkKey(base, 4));
  EXPECT_EQ(key.kind, ParsedKey::Kind::kShrink);
  EXPECT_EQ(key.epoch, 4u);
  GroupView view;
  EXPECT_EQ(EpochRanks(view, 4, 3), (std::vector<int>{0, 1, 2}));
  ASSERT_TRUE(Fold(view, key, Encode(ShrinkRecord{{0, 2}}), false));
  EXPECT_EQ(EpochRanks(view, 4, 3), (std::vector<int>{0, 2}));
  EXPECT_EQ(EpochRanks(view, 5, 3), (std::vector<int>{0, 1, 2}));  // the next epoch is whole again
  EXPECT_TRUE(Fold(view, key, "", true));
  EXPECT_EQ(EpochRanks(view, 4, 3), (std::vector<int>{0, 2}));
  for (const char* bad : {R"({"ranks":[]})", R"({"ranks":[2,0]})", R"({"ranks":[1,1]})", R"({"ranks":[-1]})", "{}"}) {
    EXPECT_FALSE(DecodeShrink(bad)) << bad;
    EXPECT_FALSE(Fold(view, key, bad, false)) << bad;
  }
}

TEST(CoordinationRecords, TheGroupIsCompleteWhenEveryRankHasJoined) {
  std::map<int, JoinRecord> joined{{0, {}}, {2, {}}};
  EXPECT_FALSE(GroupComplete(joined, AllRanks(3)));
  joined[1] = {};
  EXPECT_TRUE(GroupComplete(joined, AllRanks(3)));
  EXPECT_FALSE(GroupComplete({}, AllRanks(1)));
}

TEST(CoordinationRecords, AutoClaimsTheLowestFreeRank) {
  std::map<int, MemberRecord> members{{0, {}}, {2, {}}};
  EXPECT_EQ(LowestFreeRank(members, 3), 1);  // the replacement takes the rank its predecessor lost
  members[1] = {};
  EXPECT_EQ(LowestFreeRank(members, 3), std::nullopt);
}

TEST(CoordinationRecords, KeysSortAsNumbersAndParseBack) {
  const std::string base = GroupPrefix("/spotvisor", "llama");
  EXPECT_EQ(base, "/spotvisor/llama/");
  EXPECT_EQ(GroupPrefix("/a/", "j"), "/a/j/");
  EXPECT_LT(JoinKey(base, 9, 0), JoinKey(base, 10, 0));
  EXPECT_LT(MemberKey(base, 9), MemberKey(base, 10));
  auto k = ParseKey(base, JoinKey(base, 12, 3));
  EXPECT_EQ(k.kind, ParsedKey::Kind::kJoin);
  EXPECT_EQ(k.epoch, 12u);
  EXPECT_EQ(k.rank, 3);
  k = ParseKey(base, MemberKey(base, 7));
  EXPECT_EQ(k.kind, ParsedKey::Kind::kMember);
  EXPECT_EQ(k.rank, 7);
  k = ParseKey(base, StopKey(base, 5));
  EXPECT_EQ(k.kind, ParsedKey::Kind::kStop);
  EXPECT_EQ(k.epoch, 5u);
  EXPECT_EQ(ParseKey(base, EpochKey(base)).kind, ParsedKey::Kind::kEpoch);
  EXPECT_EQ(ParseKey(base, FailuresKey(base)).kind, ParsedKey::Kind::kFailures);
  k = ParseKey(base, DoneKey(base, 4, 1));
  EXPECT_EQ(k.kind, ParsedKey::Kind::kDone);
  EXPECT_EQ(k.epoch, 4u);
  EXPECT_EQ(k.rank, 1);
  k = ParseKey(base, SpareKey(base, 7587890123456789012));
  EXPECT_EQ(k.kind, ParsedKey::Kind::kSpare);
  EXPECT_EQ(k.lease, 7587890123456789012);
  EXPECT_LT(SpareKey(base, 9), SpareKey(base, 10));
  GroupView view;
  EXPECT_TRUE(Fold(view, k, Encode(MemberRecord{"10.0.0.3", "spare-host", 7, 1}), false));
  EXPECT_EQ(view.spares.at(7587890123456789012).host, "spare-host");
  EXPECT_FALSE(Fold(view, k, "not json", false));
  EXPECT_TRUE(Fold(view, k, "", true));
  EXPECT_TRUE(view.spares.empty());
  EXPECT_EQ(ParseKey(base, base + "spares/0").kind, ParsedKey::Kind::kOther);
  // Another job under the same prefix, or junk, is none of ours (issue 14 (g)).
  EXPECT_EQ(ParseKey(base, MemberKey(GroupPrefix("/spotvisor", "llama2"), 0)).kind, ParsedKey::Kind::kOther);
  EXPECT_EQ(ParseKey(base, base + "members/x").kind, ParsedKey::Kind::kOther);
  EXPECT_EQ(ParseKey(base, base + "join/12").kind, ParsedKey::Kind::kOther);
}

TEST(CoordinationRecords, AViewOfTheGroupFromWhatEtcdHolds) {
  const std::string base = GroupPrefix("/spotvisor", "llama");
  const auto view = ReadView(base, {{MemberKey(base, 0), Encode(MemberRecord{"10.0.0.5", "a", 1, 2})},
                                    {JoinKey(base, 3, 1), Encode(JoinRecord{{20, 10}})},
                                    {EpochKey(base), "2"},
                                    {FailuresKey(base), "4"},
                                    {StopKey(base, 2), Encode(StopRecord{0, "notice: gcp", 0})},
                                    {DoneKey(base, 2, 1), "{}"},
                                    {MemberKey(base, 1), "not json"}});
  EXPECT_EQ(view.members.size(), 1u);
  EXPECT_EQ(view.members.at(0).advertise, "10.0.0.5");
  EXPECT_EQ(view.joins.at(3).at(1).steps, (std::vector<std::uint64_t>{20, 10}));
  EXPECT_EQ(view.epoch, 2u);
  EXPECT_EQ(view.failures, 4);
  EXPECT_EQ(view.stops.at(2).why, "notice: gcp");
  EXPECT_EQ(view.done.at(2), std::set<int>{1});
  EXPECT_EQ(view.unreadable, std::vector<std::string>{MemberKey(base, 1)});
}

// The coordinator's watch folds each change as it comes: a lapsed lease deletes a member, a
// started epoch's joins go, a stop or a done stays; a foreign value changes nothing.
TEST(CoordinationRecords, FoldKeepsTheViewAsEtcdChanges) {
  const std::string base = GroupPrefix("/spotvisor", "llama");
  GroupView view;
  const auto put = [&](const std::string& key, const std::string& value) {
    return Fold(view, ParseKey(base, key), value, false);
  };
  const auto del = [&](const std::string& key) { return Fold(view, ParseKey(base, key), "", true); };
  EXPECT_TRUE(put(MemberKey(base, 0), Encode(MemberRecord{"a.pods", "a", 1, 2})));
  EXPECT_TRUE(put(MemberKey(base, 1), Encode(MemberRecord{"b.pods", "b", 3, 4})));
  EXPECT_TRUE(put(JoinKey(base, 1, 0), Encode(JoinRecord{{10}})));
  EXPECT_TRUE(put(StopKey(base, 1), Encode(StopRecord{1, "notice: gcp", 0})));
  EXPECT_TRUE(put(DoneKey(base, 1, 0), "{}"));
  EXPECT_TRUE(put(EpochKey(base), "1"));
  EXPECT_TRUE(put(FailuresKey(base), "2"));
  EXPECT_TRUE(del(MemberKey(base, 1)));
  EXPECT_TRUE(del(JoinKey(base, 1, 0)));
  EXPECT_TRUE(del(StopKey(base, 1)));
  EXPECT_TRUE(del(DoneKey(base, 1, 0)));
  EXPECT_EQ(view.members.size(), 1u);
  EXPECT_EQ(view.members.count(1), 0u);
  EXPECT_TRUE(view.joins.empty());  // an epoch whose last join went is gone
  EXPECT_EQ(view.stops.at(1).rank, 1);
  EXPECT_EQ(view.done.at(1), std::set<int>{0});
  EXPECT_EQ(view.epoch, 1u);
  EXPECT_EQ(view.failures, 2);
  // Not ours, or not what spotvisor writes: refused, the view unchanged.
  EXPECT_FALSE(put(MemberKey(base, 0), "not json"));
  EXPECT_EQ(view.members.at(0).advertise, "a.pods");
  EXPECT_FALSE(put(FailuresKey(base), "-1"));
  EXPECT_FALSE(put(EpochKey(base), "x"));
  EXPECT_FALSE(put(MemberKey(GroupPrefix("/spotvisor", "other"), 3), Encode(MemberRecord{"c", "c", 5, 6})));
  EXPECT_EQ(view.failures, 2);
  EXPECT_EQ(view.epoch, 1u);
  EXPECT_EQ(view.members.size(), 1u);
  EXPECT_TRUE(del(FailuresKey(base)));
  EXPECT_EQ(view.failures, 0);
}

TEST(CoordinationRecords, RecordsRoundTripAndForeignValuesAreErrorsNotCrashes) {
  auto m = DecodeMember(Encode(MemberRecord{"10.0.0.5", "gpu-a", 4242, 1700000000000}));
  ASSERT_TRUE(m) << m.error().message;
  EXPECT_EQ(m->advertise, "10.0.0.5");
  EXPECT_EQ(m->pid, 4242);
  auto j = DecodeJoin(Encode(JoinRecord{{30, 20}}));
  ASSERT_TRUE(j);
  EXPECT_EQ(j->steps, (std::vector<std::uint64_t>{30, 20}));
  auto s = DecodeStop(Encode(StopRecord{1, "notice: aws spot-itn", 123}));
  ASSERT_TRUE(s);
  EXPECT_EQ(s->why, "notice: aws spot-itn");
  EXPECT_EQ(s->deadline_unix_ms, 123);
  for (const char* junk : {"", "{", "[]", "{\"steps\": \"x\"}", "null"}) {
    EXPECT_FALSE(DecodeJoin(junk)) << junk;
    EXPECT_FALSE(DecodeMember(junk)) << junk;
  }
}

}  // namespace
}  // namespace spotvisor::coordination

// The group's records and its decisions (records.hpp): what every node computes alike from
// what etcd holds. Pure.
#include <gtest/gtest.h>

#include "spotvisor/coordination/records.hpp"

namespace spotvisor::coordination {
namespace {

TEST(CoordinationRecords, TheNewestStepGoodOnEveryNodeIsAgreed) {
  std::map<int, JoinRecord> joined{{0, {{30, 20, 10}}}, {1, {{20, 10}}}, {2, {{30, 20}}}};
  EXPECT_EQ(AgreedStep(joined), 20u);  // node 1 lacks 30 (node-local shards, issue 14 (e))
  joined[1] = JoinRecord{{30, 20, 10}};
  EXPECT_EQ(AgreedStep(joined), 30u);
  joined[2] = JoinRecord{{}};
  EXPECT_EQ(AgreedStep(joined), std::nullopt);  // a node with nothing: a fresh start
  joined = {{0, {{40}}}, {1, {{30}}}};
  EXPECT_EQ(AgreedStep(joined), std::nullopt);  // nothing in common
}

TEST(CoordinationRecords, TheGroupIsCompleteWhenEveryRankHasJoined) {
  std::map<int, JoinRecord> joined{{0, {}}, {2, {}}};
  EXPECT_FALSE(GroupComplete(joined, 3));
  joined[1] = {};
  EXPECT_TRUE(GroupComplete(joined, 3));
  EXPECT_FALSE(GroupComplete({}, 1));
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
  EXPECT_EQ(view.done.at(2), std::vector<int>{1});
  EXPECT_EQ(view.unreadable, std::vector<std::string>{MemberKey(base, 1)});
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

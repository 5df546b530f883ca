// The response-body parsers: real payloads from the providers' documentation (and the
// AWS mock's tab-indented form) are read; everything else is an Error, never a crash.
#include <gtest/gtest.h>

#include "spotvisor/preemption/notice_parsers.hpp"

namespace spotvisor::preemption {
namespace {

std::int64_t Unix(TimePoint t) {
  return std::chrono::duration_cast<std::chrono::seconds>(t.time_since_epoch()).count();
}

TEST(AwsParserTest, InstanceAction) {
  auto a = ParseAwsInstanceAction(R"({"action": "terminate", "time": "2017-09-18T08:22:00Z"})");
  ASSERT_TRUE(a.ok()) << a.error().message;
  EXPECT_EQ(a->action, "terminate");
  ASSERT_TRUE(a->time);
  EXPECT_EQ(Unix(*a->time), 1505722920);
  EXPECT_TRUE(ParseAwsInstanceAction("{\n\t\"action\": \"stop\",\n\t\"time\": \"2020-04-24T17:11:44Z\"\n}").ok());
  EXPECT_TRUE(ParseAwsInstanceAction(R"({"action":"hibernate","time":"2020-04-24T17:11:44Z","x":1})").ok());
  for (const char* bad :
       {"", "<html>404 - Not Found</html>", "null", "[]", R"({"time": "2017-09-18T08:22:00Z"})",
        R"({"action": "reboot", "time": "2017-09-18T08:22:00Z"})", R"({"action": 1, "time": "2017-09-18T08:22:00Z"})",
        R"({"action": "terminate", "time": "2017-09-18T08:22:00Z")",
        R"({"action": "terminate", "time": "2017-09-18T08:22:00Z"} trailing)"}) {
    EXPECT_FALSE(ParseAwsInstanceAction(bad).ok()) << bad;
  }
  // A real action with a time that cannot be read is a notice with an unknown deadline.
  for (const char* unreadable_time : {R"({"action": "terminate"})", R"({"action": "terminate", "time": "soon"})",
                                      R"({"action": "stop", "time": 1505722920})"}) {
    const auto n = ParseAwsInstanceAction(unreadable_time);
    ASSERT_TRUE(n.ok()) << unreadable_time;
    EXPECT_FALSE(n->time) << unreadable_time;
    EXPECT_FALSE(n->time_error.empty()) << unreadable_time;
  }
}

TEST(AwsParserTest, Rebalance) {
  auto t = ParseAwsRebalance(R"({"noticeTime": "2020-10-27T08:22:00Z"})");
  ASSERT_TRUE(t.ok());
  EXPECT_EQ(Unix(*t), 1603786920);
  EXPECT_FALSE(ParseAwsRebalance(R"({"noticeTime": 5})").ok());
  EXPECT_FALSE(ParseAwsRebalance(R"({"time": "2020-10-27T08:22:00Z"})").ok());
}

TEST(AzureParserTest, DocumentedEvent) {
  auto doc = ParseAzureScheduledEvents(
      R"({"DocumentIncarnation":1,"Events":[{"EventId":"A123BC45-1234-5678-AB90-ABCDEF123456",)"
      R"("EventStatus":"Scheduled","EventType":"Preempt","ResourceType":"VirtualMachine",)"
      R"("Resources":["myspotvm"],"NotBefore":"Tue, 16 Mar 2021 00:58:46 GMT","Description":"",)"
      R"("EventSource":"Platform","DurationInSeconds":-1}]})");
  ASSERT_TRUE(doc.ok()) << doc.error().message;
  EXPECT_EQ(doc->incarnation, 1);
  ASSERT_EQ(doc->events.size(), 1u);
  const auto& e = doc->events[0];
  EXPECT_EQ(e.id, "A123BC45-1234-5678-AB90-ABCDEF123456");
  EXPECT_EQ(e.type, "Preempt");
  EXPECT_EQ(e.status, "Scheduled");
  EXPECT_EQ(e.resource_type, "VirtualMachine");
  EXPECT_EQ(e.resources, std::vector<std::string>{"myspotvm"});
  ASSERT_TRUE(e.not_before.has_value());
  EXPECT_EQ(Unix(*e.not_before), 1615856326);
  EXPECT_EQ(e.duration_s, -1);
}

TEST(AzureParserTest, EmptyStartedAndOddFields) {
  auto none = ParseAzureScheduledEvents(R"({"DocumentIncarnation": 7, "Events": []})");
  ASSERT_TRUE(none.ok());
  EXPECT_TRUE(none->events.empty());
  auto started = ParseAzureScheduledEvents(
      R"({"Events":[{"EventId":"x","EventType":"Preempt","NotBefore":"","Resources":["a","b",3]}]})");
  ASSERT_TRUE(started.ok());
  EXPECT_FALSE(started->events[0].not_before.has_value());
  EXPECT_EQ(started->events[0].resources.size(), 2u);
  auto iso = ParseAzureScheduledEvents(R"({"Events":[{"EventId":"x","NotBefore":"2021-03-16T00:58:46Z"}]})");
  ASSERT_TRUE(iso.ok());  // an unparsable NotBefore is kept as text, without a time
  EXPECT_FALSE(iso->events[0].not_before.has_value());
  EXPECT_EQ(iso->events[0].not_before_text, "2021-03-16T00:58:46Z");
}

TEST(AzureParserTest, Refuses) {
  for (const char* bad :
       {"", "{}", R"({"Events": {}})", R"({"Events": [1]})", R"({"Events": [{"EventType": "Preempt"}]})",
        R"({"Events": [{"EventId": ""}]})", R"({"DocumentIncarnation": 1, "Events": [)", "<html></html>"}) {
    EXPECT_FALSE(ParseAzureScheduledEvents(bad).ok()) << bad;
  }
}

TEST(AlibabaParserTest, TerminationTime) {
  auto t = ParseAlibabaTerminationTime("2015-01-05T18:02:00Z\n");
  ASSERT_TRUE(t.ok());
  EXPECT_EQ(Unix(*t), 1420480920);
  EXPECT_FALSE(ParseAlibabaTerminationTime("").ok());
  EXPECT_FALSE(ParseAlibabaTerminationTime("not-a-time").ok());
}

TEST(FileNoticeParserTest, Content) {
  auto c = ParseFileNotice(R"({"deadline": "2030-01-01T00:00:00Z", "kind": "slurm", "action": "checkpoint"})");
  ASSERT_TRUE(c.ok()) << c.error().message;
  EXPECT_EQ(Unix(*c->deadline), 1893456000);
  EXPECT_EQ(c->kind, "slurm");
  EXPECT_EQ(c->action, NoticeAction::kCheckpoint);
  auto unix_time = ParseFileNotice(R"({"deadline": 1893456000.5})");
  ASSERT_TRUE(unix_time.ok());
  EXPECT_EQ(Unix(*unix_time->deadline), 1893456000);
  EXPECT_TRUE(ParseFileNotice("{}").ok());
  for (const char* bad : {"preempt now", R"({"deadline": true})", R"({"deadline": 5})", R"({"deadline": 1e300})",
                          R"({"action": "panic"})", R"({"deadline": "x"})"}) {
    EXPECT_FALSE(ParseFileNotice(bad).ok()) << bad;
  }
}

}  // namespace
}  // namespace spotvisor::preemption

// ISO-8601 and RFC 1123 parsing and printing: the formats AWS, Alibaba and Azure send,
// the variants seen in the wild, and what must be refused.
#include <gtest/gtest.h>

#include "spotvisor/preemption/time_format.hpp"

namespace spotvisor::preemption {
namespace {

using namespace std::chrono;

std::int64_t Unix(const Result<TimePoint>& t) { return duration_cast<seconds>(t->time_since_epoch()).count(); }

TEST(Iso8601Test, ProviderFormats) {
  EXPECT_EQ(Unix(ParseIso8601("2017-09-18T08:22:00Z")), 1505722920);
  EXPECT_EQ(Unix(ParseIso8601("2015-01-05T18:02:00Z")), 1420480920);
  EXPECT_EQ(Unix(ParseIso8601(" 2015-01-05T18:02:00Z\n")), 1420480920);
  EXPECT_EQ(Unix(ParseIso8601("2015-01-05t18:02:00z")), 1420480920);
  EXPECT_EQ(Unix(ParseIso8601("2015-01-05 18:02:00Z")), 1420480920);
  EXPECT_EQ(Unix(ParseIso8601("2015-01-05T20:02:00+02:00")), 1420480920);
  EXPECT_EQ(Unix(ParseIso8601("2015-01-05T16:32:00-0130")), 1420480920);
  EXPECT_EQ(Unix(ParseIso8601("2016-12-31T23:59:60Z")), 1483228799);  // leap second
  const auto frac = ParseIso8601("2020-10-27T08:22:00.250Z");
  ASSERT_TRUE(frac.ok());
  EXPECT_EQ(duration_cast<milliseconds>(frac->time_since_epoch()).count() % 1000, 250);
  EXPECT_TRUE(ParseIso8601("2024-02-29T00:00:00Z").ok());
  EXPECT_TRUE(ParseIso8601("2024-01-01T00:00:00.1234567891234Z").ok());
}

TEST(Iso8601Test, Refuses) {
  for (const char* bad :
       {"", "none", "2017-09-18", "2017-09-18T08:22:00", "2017-13-01T00:00:00Z", "2023-02-29T00:00:00Z",
        "2017-09-31T00:00:00Z", "2017-09-18T24:00:00Z", "2017-09-18T08:60:00Z", "2017-09-18T08:22:61Z",
        "2017-09-18T08:22:00Zjunk", "2017-09-18T08:22:00.Z", "17-09-18T08:22:00Z", "1800-01-01T00:00:00Z",
        "9999-12-31T23:59:59Z", "2017-09-18T08:22:00+25:00", "2017-09-18T08:22:00+", "+2017",
        // In range as written, out of range in UTC (a fuzzer finding: it printed as 2201).
        "2200-12-31T23:22:00-02", "1900-01-01T00:30:00+01:00"}) {
    EXPECT_FALSE(ParseIso8601(bad).ok()) << bad;
  }
  EXPECT_NE(ParseIso8601("junk").error().message.find("'junk'"), std::string::npos);
}

TEST(Rfc1123Test, AzureNotBefore) {
  EXPECT_EQ(Unix(ParseRfc1123("Tue, 16 Mar 2021 00:58:46 GMT")), 1615856326);
  EXPECT_EQ(Unix(ParseRfc1123("Mon, 19 Sep 2016 18:29:47 GMT")), 1474309787);
  EXPECT_EQ(Unix(ParseRfc1123("19 Sep 2016 18:29:47 GMT")), 1474309787);
  EXPECT_EQ(Unix(ParseRfc1123("Monday, 19 Sep 2016 18:29:47 UTC")), 1474309787);
  EXPECT_EQ(Unix(ParseRfc1123("Mon, 9 Sep 2016 18:29:47 GMT")), 1473445787);
  EXPECT_EQ(Unix(ParseRfc1123("mon, 19 sep 2016 20:29:47 +0200")), 1474309787);
}

TEST(Rfc1123Test, Refuses) {
  for (const char* bad :
       {"", " ", "Tue 16 Mar 2021 00:58:46 GMT", "Tue, 16 Foo 2021 00:58:46 GMT", "Tue, 32 Mar 2021 00:58:46 GMT",
        "Tue, 16 Mar 21 00:58:46 GMT", "Tue, 16 Mar 2021 00:58 GMT", "Tue, 16 Mar 2021 00:58:46 PST",
        "Tue, 16 Mar 2021 00:58:46", "Xyz, 16 Mar 2021 00:58:46 GMT", "2021-03-16T00:58:46Z",
        "Tue, 16 Mar 2021 00:58:46 GMT extra", "Fri, 31 Dec 2200 23:22:00 -0200"}) {
    EXPECT_FALSE(ParseRfc1123(bad).ok()) << bad;
  }
}

TEST(TimeFormatTest, PrintsAndRoundTrips) {
  const auto t = ParseIso8601("2021-03-16T00:58:46Z");
  ASSERT_TRUE(t.ok());
  EXPECT_EQ(FormatIso8601(*t), "2021-03-16T00:58:46Z");
  EXPECT_EQ(FormatRfc1123(*t), "Tue, 16 Mar 2021 00:58:46 GMT");
  EXPECT_EQ(*ParseRfc1123(FormatRfc1123(*t)), *t);
  const auto now = time_point_cast<seconds>(system_clock::now());
  EXPECT_EQ(*ParseIso8601(FormatIso8601(now)), now);
  EXPECT_EQ(*ParseRfc1123(FormatRfc1123(now)), now);
}

}  // namespace
}  // namespace spotvisor::preemption

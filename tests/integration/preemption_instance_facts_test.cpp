// InstanceFactsQuery against the in-process mock of each provider over loopback: instance
// type, zone and region as each service spells them; an endpoint that does not answer
// leaves every fact unknown and says which request failed.
#include <gtest/gtest.h>

#include <boost/asio/io_context.hpp>

#include "integration/preemption_test_util.hpp"
#include "spotvisor/mock/mock_metadata_server.hpp"
#include "spotvisor/preemption/instance_facts.hpp"

namespace spotvisor {
namespace {

using config::ProviderKind;
using preemption::InstanceFacts;
using preemption::InstanceFactsQuery;

std::optional<InstanceFacts> Ask(boost::asio::io_context& io, ProviderKind kind, const std::string& url) {
  auto provider = testing::FastProvider(kind, url);
  auto query = InstanceFactsQuery::Make(io, provider);
  EXPECT_NE(query, nullptr);
  if (!query) return std::nullopt;
  std::optional<InstanceFacts> got;
  query->Start([&](InstanceFacts f) { got = std::move(f); });
  EXPECT_TRUE(testing::RunUntil(io, [&] { return got.has_value(); }));
  return got;
}

TEST(InstanceFacts, EachProviderAsItSpellsThem) {
  struct Case {
    mock::MockProvider mock;
    ProviderKind kind;
    InstanceFacts expected;
  };
  const std::vector<Case> cases = {
      {mock::MockProvider::kAws, ProviderKind::kAws, {"g5.xlarge", "us-east-1a", "us-east-1", ""}},
      {mock::MockProvider::kGcp, ProviderKind::kGcp, {"a2-highgpu-1g", "us-central1-a", "us-central1", ""}},
      {mock::MockProvider::kAzure, ProviderKind::kAzure, {"Standard_NC6s_v3", "1", "eastus", ""}},
      {mock::MockProvider::kAlibaba,
       ProviderKind::kAlibaba,
       {"ecs.gn7i-c8g1.2xlarge", "cn-hangzhou-i", "cn-hangzhou", ""}},
  };
  for (const auto& c : cases) {
    boost::asio::io_context io;
    mock::MockMetadataServer server(io, c.mock, {.imdsv2_required = true});
    ASSERT_TRUE(server.Start().ok());
    const auto facts = Ask(io, c.kind, "http://127.0.0.1:" + std::to_string(server.port()));
    ASSERT_TRUE(facts.has_value());
    EXPECT_EQ(facts->instance_type, c.expected.instance_type) << mock::ToString(c.mock);
    EXPECT_EQ(facts->zone, c.expected.zone) << mock::ToString(c.mock);
    EXPECT_EQ(facts->region, c.expected.region) << mock::ToString(c.mock);
    EXPECT_EQ(facts->trouble, "") << mock::ToString(c.mock);
  }
}

TEST(InstanceFacts, NoAnswerLeavesThemUnknown) {
  boost::asio::io_context io;
  const auto facts = Ask(io, ProviderKind::kAws, "http://127.0.0.1:" + std::to_string(testing::ClosedPort()));
  ASSERT_TRUE(facts.has_value());
  EXPECT_EQ(facts->instance_type, "");
  EXPECT_EQ(facts->zone, "");
  EXPECT_EQ(facts->region, "");
  EXPECT_NE(facts->trouble.find("/latest/api/token"), std::string::npos) << facts->trouble;

  config::ProviderSection none;
  none.kind = ProviderKind::kNone;
  EXPECT_EQ(InstanceFactsQuery::Make(io, none), nullptr);
}

}  // namespace
}  // namespace spotvisor

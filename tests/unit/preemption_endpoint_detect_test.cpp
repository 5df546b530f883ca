// provider.endpoint parsing in the metadata watchers' words, and DMI-based provider
// detection (`provider.kind: auto`) against a fake /sys/class/dmi/id.
#include <gtest/gtest.h>

#include <boost/asio/io_context.hpp>

#include "spotvisor/config/provider_detect.hpp"
#include "spotvisor/preemption/metadata_endpoint.hpp"
#include "spotvisor/preemption/watcher.hpp"
#include "support/test_support.hpp"

namespace spotvisor::preemption {
namespace {

using config::DetectProvider;
using config::ProviderKind;

// provider.endpoint goes through the http module's parser; its messages stay the ones a
// user of the metadata watchers has always read.
TEST(MetadataEndpointTest, MessagesNameProviderEndpoint) {
  EXPECT_TRUE(ParseMetadataEndpoint("http://127.0.0.1:1338").ok());
  EXPECT_NE(ParseMetadataEndpoint("https://x").error().message.find("provider.endpoint"), std::string::npos);
  EXPECT_EQ(ParseMetadataEndpoint("https://x").error().message,
            "provider.endpoint 'https://x': metadata services speak plain http, not https");
  EXPECT_EQ(ParseMetadataEndpoint("http://host/latest").error().message,
            "provider.endpoint 'http://host/latest': expected only scheme://host:port (the provider's paths are "
            "appended)");
  EXPECT_EQ(ParseMetadataEndpoint("http://host:0").error().message,
            "provider.endpoint 'http://host:0': port out of range");
  EXPECT_STREQ(DefaultEndpoint(ProviderKind::kAws), "http://169.254.169.254");
  EXPECT_STREQ(DefaultEndpoint(ProviderKind::kAlibaba), "http://100.100.100.200");
}

void Dmi(const testing::TempDir& dir, const std::string& name, const std::string& value) {
  testing::WriteFile(dir / name, value + "\n");
}

TEST(DetectTest, EachCloud) {
  {
    testing::TempDir d;
    Dmi(d, "sys_vendor", "Amazon EC2");
    EXPECT_EQ(DetectProvider(d.path()).kind, ProviderKind::kAws);
    EXPECT_EQ(DetectProvider(d.path()).evidence, "sys_vendor='Amazon EC2'");
  }
  {
    testing::TempDir d;  // older Xen instances
    Dmi(d, "sys_vendor", "Xen");
    Dmi(d, "bios_version", "4.11.amazon");
    EXPECT_EQ(DetectProvider(d.path()).kind, ProviderKind::kAws);
  }
  {
    testing::TempDir d;
    Dmi(d, "sys_vendor", "Google");
    Dmi(d, "product_name", "Google Compute Engine");
    EXPECT_EQ(DetectProvider(d.path()).kind, ProviderKind::kGcp);
  }
  {
    testing::TempDir d;
    Dmi(d, "sys_vendor", "Microsoft Corporation");
    Dmi(d, "chassis_asset_tag", "7783-7084-3265-9085-8269-3286-77");
    EXPECT_EQ(DetectProvider(d.path()).kind, ProviderKind::kAzure);
  }
  {
    testing::TempDir d;  // a Hyper-V VM on a desk is not Azure
    Dmi(d, "sys_vendor", "Microsoft Corporation");
    Dmi(d, "product_name", "Virtual Machine");
    EXPECT_EQ(DetectProvider(d.path()).kind, ProviderKind::kNone);
    EXPECT_NE(DetectProvider(d.path()).evidence.find("Virtual Machine"), std::string::npos);
  }
  {
    testing::TempDir d;
    Dmi(d, "sys_vendor", "Alibaba Cloud");
    Dmi(d, "product_name", "Alibaba Cloud ECS");
    EXPECT_EQ(DetectProvider(d.path()).kind, ProviderKind::kAlibaba);
  }
  EXPECT_EQ(DetectProvider("/nonexistent/dmi").kind, ProviderKind::kNone);
}

TEST(MakeWatcherTest, KindsAndErrors) {
  boost::asio::io_context io;
  config::ProviderSection p;
  p.kind = ProviderKind::kNone;
  auto none = MakeWatcher(io, SystemClock(), p);
  ASSERT_TRUE(none.ok());
  EXPECT_EQ(none->get(), nullptr);

  p.kind = ProviderKind::kAuto;
  p.dmi_root = "/nonexistent/dmi";
  config::ResolveProvider(p);  // as config::Finalize does, once per run
  auto undetected = MakeWatcher(io, SystemClock(), p);
  ASSERT_TRUE(undetected.ok());
  EXPECT_EQ(undetected->get(), nullptr);

  testing::TempDir d;
  Dmi(d, "sys_vendor", "Amazon EC2");
  p.kind = ProviderKind::kAuto;
  p.dmi_root = d.path();
  config::ResolveProvider(p);
  auto detected = MakeWatcher(io, SystemClock(), p);
  ASSERT_TRUE(detected.ok());
  EXPECT_NE(detected->get(), nullptr);

  p.kind = ProviderKind::kAws;
  p.endpoint = "https://169.254.169.254";
  EXPECT_FALSE(MakeWatcher(io, SystemClock(), p).ok());
  p.endpoint.clear();
  p.poll_interval = std::chrono::milliseconds(0);
  EXPECT_FALSE(MakeWatcher(io, SystemClock(), p).ok());
  p.poll_interval = std::chrono::seconds(1);
  p.kind = ProviderKind::kFile;
  EXPECT_FALSE(MakeWatcher(io, SystemClock(), p).ok());  // provider.file is required
  for (const auto kind : {ProviderKind::kAws, ProviderKind::kGcp, ProviderKind::kAzure, ProviderKind::kAlibaba}) {
    p.kind = kind;
    auto w = MakeWatcher(io, SystemClock(), p);
    ASSERT_TRUE(w.ok());
    EXPECT_NE(w->get(), nullptr);  // built, never started: touches no network
  }
}

}  // namespace
}  // namespace spotvisor::preemption

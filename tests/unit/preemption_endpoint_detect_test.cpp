// provider.endpoint parsing and DMI-based provider detection (`provider.kind: auto`)
// against a fake /sys/class/dmi/id.
#include <gtest/gtest.h>

#include <boost/asio/io_context.hpp>

#include "spotvisor/preemption/endpoint.hpp"
#include "spotvisor/preemption/provider_detect.hpp"
#include "spotvisor/preemption/watcher.hpp"
#include "support/test_support.hpp"

namespace spotvisor::preemption {
namespace {

using config::ProviderKind;

TEST(EndpointTest, Parses) {
  auto a = ParseEndpoint("http://127.0.0.1:1338");
  ASSERT_TRUE(a.ok());
  EXPECT_EQ(a->host, "127.0.0.1");
  EXPECT_EQ(a->port, 1338);
  EXPECT_EQ(a->host_header, "127.0.0.1:1338");
  EXPECT_EQ(a->url, "http://127.0.0.1:1338");
  auto b = ParseEndpoint("http://169.254.169.254/");
  ASSERT_TRUE(b.ok());
  EXPECT_EQ(b->port, 80);
  EXPECT_EQ(b->host_header, "169.254.169.254");
  auto c = ParseEndpoint("http://[::1]:8080");
  ASSERT_TRUE(c.ok());
  EXPECT_EQ(c->host, "::1");
  EXPECT_EQ(c->host_header, "[::1]:8080");
  EXPECT_TRUE(ParseEndpoint("http://metadata.google.internal").ok());
}

TEST(EndpointTest, Refuses) {
  for (const char* bad :
       {"", "127.0.0.1:1338", "https://169.254.169.254", "http://", "http://:80", "http://host:0",
        "http://host:65536", "http://host:", "http://host:8x", "http://host/latest",
        "http://user@host", "http://[::1", "http://ho st", "http://host:99999999999999999999"}) {
    EXPECT_FALSE(ParseEndpoint(bad).ok()) << bad;
  }
  EXPECT_NE(ParseEndpoint("https://x").error().message.find("provider.endpoint"),
            std::string::npos);
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
  auto none = MakeWatcher(io, p);
  ASSERT_TRUE(none.ok());
  EXPECT_EQ(none->get(), nullptr);

  p.kind = ProviderKind::kAuto;
  p.dmi_root = "/nonexistent/dmi";
  auto undetected = MakeWatcher(io, p);
  ASSERT_TRUE(undetected.ok());
  EXPECT_EQ(undetected->get(), nullptr);

  testing::TempDir d;
  Dmi(d, "sys_vendor", "Amazon EC2");
  p.dmi_root = d.path();
  auto detected = MakeWatcher(io, p);
  ASSERT_TRUE(detected.ok());
  EXPECT_NE(detected->get(), nullptr);

  p.kind = ProviderKind::kAws;
  p.endpoint = "https://169.254.169.254";
  EXPECT_FALSE(MakeWatcher(io, p).ok());
  p.endpoint.clear();
  p.poll_interval = std::chrono::milliseconds(0);
  EXPECT_FALSE(MakeWatcher(io, p).ok());
  p.poll_interval = std::chrono::seconds(1);
  p.kind = ProviderKind::kFile;
  EXPECT_FALSE(MakeWatcher(io, p).ok());  // provider.file is required
  for (const auto kind :
       {ProviderKind::kAws, ProviderKind::kGcp, ProviderKind::kAzure, ProviderKind::kAlibaba}) {
    p.kind = kind;
    auto w = MakeWatcher(io, p);
    ASSERT_TRUE(w.ok());
    EXPECT_NE(w->get(), nullptr);  // built, never started: touches no network
  }
}

}  // namespace
}  // namespace spotvisor::preemption

// DMI-based cloud detection. The strings are the ones each provider documents or that
// its images show: "Amazon EC2" (Nitro) or an "amazon" Xen BIOS, "Google Compute Engine",
// Azure's fixed chassis asset tag, "Alibaba Cloud".
#include "spotvisor/config/provider_detect.hpp"

#include <algorithm>
#include <array>
#include <cctype>
#include <fstream>

#include "spotvisor/util/text.hpp"

namespace spotvisor::config {
namespace {

constexpr std::string_view kAzureAssetTag = "7783-7084-3265-9085-8269-3286-77";

// The first line of `dir/name`, trimmed; empty when unreadable. At most 256 bytes.
std::string ReadDmi(const std::filesystem::path& dir, const char* name) {
  std::ifstream in(dir / name, std::ios::binary);
  if (!in) return {};
  std::string text(256, '\0');
  in.read(text.data(), static_cast<std::streamsize>(text.size()));
  text.resize(static_cast<std::size_t>(in.gcount()));
  text = text.substr(0, text.find('\n'));
  while (!text.empty() && std::isspace(static_cast<unsigned char>(text.back()))) text.pop_back();
  return text;
}

bool Contains(const std::string& haystack, std::string_view needle) {
  return AsciiLower(haystack).find(needle) != std::string::npos;
}

}  // namespace

Detection DetectProvider(const std::filesystem::path& dmi_root) {
  constexpr std::array<const char*, 7> kNames = {"sys_vendor",   "product_name", "product_version",  "bios_vendor",
                                                 "bios_version", "board_vendor", "chassis_asset_tag"};
  std::array<std::string, kNames.size()> values;
  for (std::size_t i = 0; i < kNames.size(); ++i) values[i] = ReadDmi(dmi_root, kNames[i]);
  const auto value = [&](std::size_t i) -> const std::string& { return values[i]; };
  const auto evidence = [&](std::size_t i) { return std::string(kNames[i]) + "='" + values[i] + "'"; };
  enum : std::size_t { kSysVendor, kProductName, kProductVersion, kBiosVendor, kBiosVersion, kBoardVendor, kAssetTag };
  if (Contains(value(kSysVendor), "amazon ec2")) return {ProviderKind::kAws, evidence(kSysVendor)};
  if (Contains(value(kBiosVendor), "amazon ec2")) return {ProviderKind::kAws, evidence(kBiosVendor)};
  if (Contains(value(kBiosVersion), "amazon")) return {ProviderKind::kAws, evidence(kBiosVersion)};
  if (Contains(value(kProductName), "google compute engine")) {
    return {ProviderKind::kGcp, evidence(kProductName)};
  }
  if (Contains(value(kSysVendor), "google")) return {ProviderKind::kGcp, evidence(kSysVendor)};
  if (value(kAssetTag) == kAzureAssetTag) return {ProviderKind::kAzure, evidence(kAssetTag)};
  if (Contains(value(kSysVendor), "alibaba")) return {ProviderKind::kAlibaba, evidence(kSysVendor)};
  if (Contains(value(kProductName), "alibaba cloud")) {
    return {ProviderKind::kAlibaba, evidence(kProductName)};
  }
  std::string seen;
  for (std::size_t i = 0; i < kNames.size(); ++i) {
    if (!values[i].empty()) seen += (seen.empty() ? "" : " ") + evidence(i);
  }
  return {ProviderKind::kNone, seen.empty() ? "no DMI strings under " + dmi_root.string() : seen};
}

void ResolveProvider(ProviderSection& provider) {
  if (provider.kind != ProviderKind::kAuto) return;
  Detection found = DetectProvider(provider.dmi_root);
  provider.kind = found.kind;
  provider.detected_from = std::move(found.evidence);
}

}  // namespace spotvisor::config

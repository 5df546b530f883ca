// `provider.kind: auto`: which cloud this machine runs on, from the DMI strings the
// hypervisor sets (no network probe). The root is configurable so tests can fake /sys.
#pragma once

#include <filesystem>
#include <string>

#include "spotvisor/config/job_config.hpp"

namespace spotvisor::preemption {

struct Detection {
  config::ProviderKind kind = config::ProviderKind::kNone;  // kNone when nothing matched
  std::string evidence;  // e.g. "sys_vendor='Amazon EC2'", or what was read when nothing matched
};

// Reads sys_vendor, product_name, product_version, bios_vendor, bios_version, board_vendor
// and chassis_asset_tag under `dmi_root` (missing files are fine). Any thread.
Detection DetectProvider(const std::filesystem::path& dmi_root);

// "aws", "gcp", "azure", "alibaba", "file" or "none": provider.kind, `auto` resolved from DMI.
std::string ProviderName(const config::JobConfig& job);

}  // namespace spotvisor::preemption

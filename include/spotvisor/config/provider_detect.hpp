// `provider.kind: auto`: which cloud this machine runs on, from the DMI strings the
// hypervisor sets (no network probe), resolved once when the job is finalized (finalize.hpp)
// so that every reader sees the same kind. The root is configurable so tests can fake /sys.
#pragma once

#include <filesystem>
#include <string>

#include "spotvisor/config/job_config.hpp"

namespace spotvisor::config {

struct Detection {
  ProviderKind kind = ProviderKind::kNone;  // kNone when nothing matched
  std::string evidence;                     // e.g. "sys_vendor='Amazon EC2'", or what was read when nothing matched
};

// Reads sys_vendor, product_name, product_version, bios_vendor, bios_version, board_vendor
// and chassis_asset_tag under `dmi_root` (missing files are fine). Any thread.
Detection DetectProvider(const std::filesystem::path& dmi_root);

// `kind: auto` replaced by what DMI under `dmi_root` says, the evidence kept in
// `detected_from` (for --print-config, the log and the report); a written kind stays.
void ResolveProvider(ProviderSection& provider);

}  // namespace spotvisor::config

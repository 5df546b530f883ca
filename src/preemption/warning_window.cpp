// The providers' warning windows; see warning_window.hpp.
#include "spotvisor/preemption/warning_window.hpp"

namespace spotvisor::preemption {

Duration WarningWindow(const std::string& provider, const config::ProviderSection& section) {
  if (provider == "aws") return std::chrono::seconds(120);
  if (provider == "gcp" || provider == "azure") return std::chrono::seconds(30);
  if (provider == "alibaba") return std::chrono::minutes(5);
  return section.default_window;
}

}  // namespace spotvisor::preemption

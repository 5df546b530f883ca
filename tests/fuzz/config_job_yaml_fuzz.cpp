// libFuzzer target: any job file text is either a JobConfig or an Error that names where
// (never a crash, an exception escaping, or a hang); what loads also prints as YAML.
#include <cstddef>
#include <cstdint>
#include <string>

#include "spotvisor/config/loader.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  auto job = spotvisor::config::LoadJobText(text, "fuzz.yaml", "/nonexistent-fuzz-base");
  if (job) (void)spotvisor::config::ToYaml(*job);
  return 0;
}

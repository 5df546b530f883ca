// libFuzzer target: Azure Scheduled Events documents never crash the parser; every
// accepted event has an EventId, and a parsed NotBefore agrees with its text.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include "spotvisor/preemption/notice_parsers.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace spotvisor::preemption;
  const std::string_view body(reinterpret_cast<const char*>(data), size);
  const auto doc = ParseAzureScheduledEvents(body);
  if (!doc) return 0;
  for (const auto& event : doc->events) {
    if (event.id.empty()) std::abort();
    if (event.not_before && ParseRfc1123(event.not_before_text).value() != *event.not_before) {
      std::abort();
    }
  }
  return 0;
}

// libFuzzer target: ParseIso8601 (AWS `time`/`noticeTime`, Alibaba termination-time) never
// crashes, and whatever it accepts prints and parses back to the same second.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include "spotvisor/preemption/time_format.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace spotvisor::preemption;
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  const auto parsed = ParseIso8601(text);
  if (!parsed) return 0;
  const auto whole = std::chrono::floor<std::chrono::seconds>(*parsed);
  const auto again = ParseIso8601(FormatIso8601(*parsed));
  if (!again || *again != whole) std::abort();
  return 0;
}

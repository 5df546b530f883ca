// libFuzzer target: the optional JSON content of a trigger file (provider.kind: file) and
// the mock server's control body never crash their parsers.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "spotvisor/mock/mock_metadata_server.hpp"
#include "spotvisor/preemption/notice_parsers.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  (void)spotvisor::preemption::ParseFileNotice(text);
  (void)spotvisor::mock::ParsePreemptSpec(text);
  return 0;
}

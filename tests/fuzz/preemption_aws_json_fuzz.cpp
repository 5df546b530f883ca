// libFuzzer target: the AWS bodies (spot/instance-action, rebalance recommendation) never
// crash the parsers; an accepted instance-action always has one of the three actions.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include "spotvisor/preemption/notice_parsers.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace spotvisor::preemption;
  const std::string_view body(reinterpret_cast<const char*>(data), size);
  if (const auto action = ParseAwsInstanceAction(body)) {
    if (action->action != "terminate" && action->action != "stop" && action->action != "hibernate") {
      std::abort();
    }
  }
  (void)ParseAwsRebalance(body);
  (void)ParseAlibabaTerminationTime(body);
  return 0;
}

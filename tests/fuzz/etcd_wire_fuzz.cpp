// libFuzzer target: every parser of the etcd gateway's answers (unary bodies, keepalive and
// watch stream lines, error objects, base64) takes any bytes without crashing; a decoded
// base64 text encodes back to an equivalent text.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include "spotvisor/etcd/wire.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace spotvisor::etcd;
  const std::string_view body(reinterpret_cast<const char*>(data), size);
  (void)ParseGatewayError(body);
  (void)ParsePutResponse(body);
  (void)ParseRangeResponse(body);
  (void)ParseDeleteRangeResponse(body);
  (void)ParseTxnResponse(body);
  (void)ParseCompactionResponse(body);
  (void)ParseLeaseGrantResponse(body);
  (void)ParseLeaseRevokeResponse(body);
  (void)ParseLeaseTimeToLiveResponse(body);
  (void)ParseAuthenticateResponse(body);
  (void)ParseLeaseKeepAliveResponse(body);
  if (const auto watch = ParseWatchLine(body)) {
    if (watch->IsProgressNotify() && (watch->created || watch->canceled || !watch->events.empty())) std::abort();
  }
  if (const auto decoded = Base64Decode(body)) {
    const auto again = Base64Decode(Base64Encode(*decoded));
    if (!again || *again != *decoded) std::abort();
  }
  return 0;
}

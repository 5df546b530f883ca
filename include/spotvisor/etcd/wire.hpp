// The etcd v3 JSON gateway's wire format (etcd 3.4, /v3/...): request bodies from the types
// of types.hpp, and the parsers of its answers. Keys and values travel in base64, int64
// fields as strings, fields at their proto3 default are left out. Pure functions, any
// thread; the parsers take untrusted bytes (fuzzed by tests/fuzz/etcd_*_fuzz.cpp).
#pragma once

#include <optional>
#include <string>
#include <string_view>

#include "spotvisor/etcd/types.hpp"
#include "spotvisor/util/result.hpp"

namespace spotvisor::etcd {

// Standard base64 with padding (RFC 4648 section 4), as protobuf's JSON mapping writes bytes.
std::string Base64Encode(std::string_view bytes);
// Accepts padded and unpadded text and the URL-safe alphabet; nullopt on any other byte.
std::optional<std::string> Base64Decode(std::string_view text);

// Request bodies (JSON objects) for the gateway's POST endpoints.
std::string EncodePut(const PutRequest& request);                                  // /v3/kv/put
std::string EncodeRange(const RangeRequest& request);                              // /v3/kv/range
std::string EncodeDeleteRange(const DeleteRangeRequest& request);                  // /v3/kv/deleterange
std::string EncodeTxn(const TxnRequest& request);                                  // /v3/kv/txn
std::string EncodeCompaction(std::int64_t revision);                               // /v3/kv/compaction
std::string EncodeLeaseGrant(std::int64_t ttl_seconds);                            // /v3/lease/grant
std::string EncodeLeaseId(std::int64_t id);                                        // keepalive, revoke
std::string EncodeLeaseTimeToLive(std::int64_t id, bool keys);                     // /v3/lease/timetolive
std::string EncodeAuthenticate(std::string_view name, std::string_view password);  // /v3/auth/authenticate

struct WatchCreate {
  std::string key;                  // the key, or the start of the range
  std::string range_end;            // empty: the key alone; PrefixEnd(key): the prefix
  std::int64_t start_revision = 0;  // first revision to report (0: from now on)
  bool prev_kv = false;             // events carry the previous pair
  bool progress_notify = true;      // the server reports progress while nothing happens
};
std::string EncodeWatchCreate(const WatchCreate& request);  // /v3/watch

// An error answer: `{"error":"...","code":N}` (unary) or `{"error":{"grpc_code":N,...}}`
// (a stream). `code` is the gRPC status code (5 not found, 11 out of range, 14 unavailable,
// 16 unauthenticated, ...).
struct GatewayError {
  int code = 0;         // gRPC status code (0: not given)
  std::string message;  // the server's words
};
// The error a body carries, if it is one; nullopt for anything else (a success or not JSON).
std::optional<GatewayError> ParseGatewayError(std::string_view body);

// The parsers of successful answers. An Error says what is wrong with the body (not JSON,
// a field of the wrong type, bad base64); the caller adds the URL and the operation.
Result<PutResponse> ParsePutResponse(std::string_view body);
Result<RangeResponse> ParseRangeResponse(std::string_view body);
Result<DeleteRangeResponse> ParseDeleteRangeResponse(std::string_view body);
Result<TxnResponse> ParseTxnResponse(std::string_view body);
Result<CompactionResponse> ParseCompactionResponse(std::string_view body);
Result<LeaseGrantResponse> ParseLeaseGrantResponse(std::string_view body);
Result<LeaseRevokeResponse> ParseLeaseRevokeResponse(std::string_view body);
Result<LeaseTimeToLiveResponse> ParseLeaseTimeToLiveResponse(std::string_view body);
Result<AuthenticateResponse> ParseAuthenticateResponse(std::string_view body);
// The keepalive answer: the stream's `{"result":{...}}` line(s); the first result counts.
Result<LeaseKeepAliveResponse> ParseLeaseKeepAliveResponse(std::string_view body);
// One line of a watch stream, `{"result":{...}}`; an `{"error":...}` line is an Error.
Result<WatchResponse> ParseWatchLine(std::string_view line);

}  // namespace spotvisor::etcd

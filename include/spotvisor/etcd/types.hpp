// The etcd v3 requests and responses spotvisor uses, as plain values: keys and values are
// raw bytes here (base64 only on the wire), revisions and lease ids are int64. Field names
// follow etcd's rpc.proto so that its documentation reads across. Pure data, any thread.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <variant>
#include <vector>

namespace spotvisor::etcd {

// The header of every response: the store's revision when the request was served.
struct ResponseHeader {
  std::uint64_t cluster_id = 0;  // the cluster that answered
  std::uint64_t member_id = 0;   // the member that answered
  std::int64_t revision = 0;     // the key-value store's revision
  std::uint64_t raft_term = 0;   // the raft term
};

struct KeyValue {
  std::string key;                   // raw bytes
  std::string value;                 // raw bytes
  std::int64_t create_revision = 0;  // revision of the key's creation (0: no such key)
  std::int64_t mod_revision = 0;     // revision of the last modification
  std::int64_t version = 0;          // number of modifications since creation
  std::int64_t lease = 0;            // the lease attached (0: none)
};

// The end of the range holding every key that starts with `prefix` ("\0" for an empty prefix:
// every key).
std::string PrefixEnd(const std::string& prefix);

struct PutRequest {
  std::string key;         // raw bytes
  std::string value;       // raw bytes
  std::int64_t lease = 0;  // attach to this lease (0: none)
  bool prev_kv = false;    // return the previous key-value pair
};

struct RangeRequest {
  std::string key;            // the key, or the start of the range
  std::string range_end;      // empty: `key` alone; PrefixEnd(key): the prefix
  std::int64_t revision = 0;  // read at this revision (0: the newest)
  std::int64_t limit = 0;     // at most this many keys (0: no limit)
  bool count_only = false;    // only the count, no key-value pairs
  bool keys_only = false;     // key-value pairs without their values
};

struct DeleteRangeRequest {
  std::string key;        // the key, or the start of the range
  std::string range_end;  // as in RangeRequest
  bool prev_kv = false;   // return the deleted pairs
};

// One comparison of a transaction: `target` of `key` compared with the given value.
struct Compare {
  enum class Target { kVersion, kCreateRevision, kModRevision, kValue, kLease };
  enum class Result { kEqual, kGreater, kLess, kNotEqual };
  std::string key;                   // raw bytes
  Target target = Target::kVersion;  // which field
  Result result = Result::kEqual;    // how
  std::int64_t number = 0;           // for every target but kValue
  std::string value;                 // for kValue (raw bytes)

  // The usual comparisons, by name.
  static Compare CreateRevision(std::string key, Result result, std::int64_t revision);
  static Compare ModRevision(std::string key, Result result, std::int64_t revision);
  static Compare Version(std::string key, Result result, std::int64_t version);
  static Compare Value(std::string key, Result result, std::string value);
  // True when `key` does not exist (create_revision == 0): the create-only idiom.
  static Compare Absent(std::string key);
};

// One operation inside a transaction.
using TxnOp = std::variant<PutRequest, RangeRequest, DeleteRangeRequest>;

struct TxnRequest {
  std::vector<Compare> compare;  // all must hold for `success` to run
  std::vector<TxnOp> success;    // run when every comparison holds
  std::vector<TxnOp> failure;    // run otherwise
};

struct PutResponse {
  ResponseHeader header;
  std::optional<KeyValue> prev_kv;  // with prev_kv, when the key existed
};

struct RangeResponse {
  ResponseHeader header;
  std::vector<KeyValue> kvs;  // in key order
  bool more = false;          // the limit cut the answer short
  std::int64_t count = 0;     // keys in the range
};

struct DeleteRangeResponse {
  ResponseHeader header;
  std::int64_t deleted = 0;        // keys deleted
  std::vector<KeyValue> prev_kvs;  // with prev_kv
};

using TxnOpResponse = std::variant<PutResponse, RangeResponse, DeleteRangeResponse>;

struct TxnResponse {
  ResponseHeader header;
  bool succeeded = false;                // absent on the wire when false
  std::vector<TxnOpResponse> responses;  // one per operation that ran, in order
};

struct LeaseGrantResponse {
  ResponseHeader header;
  std::int64_t id = 0;   // the lease
  std::int64_t ttl = 0;  // seconds granted
};

// One keepalive's answer. ttl == 0 (absent on the wire): the lease has expired or is unknown.
struct LeaseKeepAliveResponse {
  ResponseHeader header;
  std::int64_t id = 0;   // the lease
  std::int64_t ttl = 0;  // seconds left after this renewal
};

struct LeaseRevokeResponse {
  ResponseHeader header;
};

// ttl == -1: the lease has expired or never existed.
struct LeaseTimeToLiveResponse {
  ResponseHeader header;
  std::int64_t id = 0;            // the lease
  std::int64_t ttl = 0;           // seconds left
  std::int64_t granted_ttl = 0;   // seconds granted
  std::vector<std::string> keys;  // keys attached, when asked for
};

struct CompactionResponse {
  ResponseHeader header;
};

struct AuthenticateResponse {
  ResponseHeader header;
  std::string token;  // a secret: never logged
};

struct Event {
  enum class Type { kPut, kDelete };
  Type type = Type::kPut;           // absent on the wire for a PUT
  KeyValue kv;                      // the key after the event (a DELETE: key and mod_revision)
  std::optional<KeyValue> prev_kv;  // before the event, when the watch asked for it
};

// One message of a watch stream.
struct WatchResponse {
  ResponseHeader header;
  std::int64_t watch_id = 0;
  bool created = false;               // the answer to the create request
  bool canceled = false;              // the server ended the watch
  std::int64_t compact_revision = 0;  // canceled because the start revision was compacted
  std::string cancel_reason;          // why, when the server says
  bool fragment = false;              // more of the same revision follows
  std::vector<Event> events;          // in revision order
  // A progress notification: nothing happened up to header.revision.
  bool IsProgressNotify() const { return !created && !canceled && events.empty(); }
};

}  // namespace spotvisor::etcd

// The etcd v3 client: key-value requests, transactions and leases through the JSON gateway
// of one or more members (transport.hpp), each with a deadline. Asynchronous on the caller's
// io_context: every call returns at once and its handler runs later on that thread, exactly
// once, unless the client is destroyed first (then never). Not thread-safe. The client's
// Clock is the one its lease keepers and watches wait on; each request holds the clock's
// BackgroundWork while in flight, so that a virtual clock stands still while etcd answers.
// The requests' own deadlines are real time: they bound a wait on a real socket.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "spotvisor/etcd/transport.hpp"
#include "spotvisor/etcd/types.hpp"
#include "spotvisor/util/clock.hpp"
#include "spotvisor/util/result.hpp"
#include "spotvisor/util/units.hpp"

namespace spotvisor::etcd {

struct ClientOptions {
  std::vector<std::string> endpoints;                  // "http://10.0.0.5:2379", at least one; all http or all https
  std::string credentials_file;                        // "name:password", mode 0600; empty: no auth
  Duration request_timeout = std::chrono::seconds(2);  // deadline of one request, all members together
  http::TlsFiles tls;                                  // https only: CA (empty: the system's), client cert and key
};

template <class T>
using Callback = std::function<void(Result<T>)>;

class Client {
 public:
  // Checks every endpoint URL, reads the credentials file and the TLS files; connects to
  // nothing yet. Refuses a mix of http and https members, and TLS files for http ones.
  // `clock` outlives the client.
  static Result<std::unique_ptr<Client>> Create(boost::asio::io_context& io, Clock& clock,
                                                const ClientOptions& options);
  Client(boost::asio::io_context& io, Clock& clock, std::vector<Member> members, std::optional<Credentials> credentials,
         Duration request_timeout, std::shared_ptr<http::TlsContext> tls = nullptr);

  void Put(PutRequest request, Callback<PutResponse> done);
  void Range(RangeRequest request, Callback<RangeResponse> done);
  void DeleteRange(DeleteRangeRequest request, Callback<DeleteRangeResponse> done);
  // The answer is a success whether or not the comparisons held: see TxnResponse::succeeded.
  // A txn retried on another member after a timeout may have been applied by the first one.
  void Txn(TxnRequest request, Callback<TxnResponse> done);
  // Drops the history before `revision` (watches from older revisions are then canceled).
  void Compact(std::int64_t revision, Callback<CompactionResponse> done);

  void LeaseGrant(std::int64_t ttl_seconds, Callback<LeaseGrantResponse> done);
  // One keepalive (one POST, etcd#8237); ttl == 0 in the answer: the lease is gone.
  // `timeout` replaces the request timeout (the keeper passes the time left on the lease).
  void LeaseKeepAliveOnce(std::int64_t id, Duration timeout, Callback<LeaseKeepAliveResponse> done);
  void LeaseRevoke(std::int64_t id, Callback<LeaseRevokeResponse> done);
  void LeaseTimeToLive(std::int64_t id, bool keys, Callback<LeaseTimeToLiveResponse> done);

  Transport& transport() { return transport_; }
  Clock& clock() { return clock_; }
  Duration request_timeout() const { return request_timeout_; }

 private:
  template <class T>
  void Call(const char* path, std::string body, std::string operation, Duration timeout,
            Result<T> (*parse)(std::string_view), Callback<T> done);

  Clock& clock_;              // the owner's: timers of keepers and watches
  Transport transport_;       // members, failover, auth
  Duration request_timeout_;  // per request
};

}  // namespace spotvisor::etcd

// A small HTTP/1.1 client (the metadata watchers, preflight's probes, etcd, the tests): one
// exchange at a time over one kept-alive connection (TLS for an https endpoint, stream.hpp),
// a deadline on every exchange (resolve, connect, handshake, write and read together), body
// and header limits, no proxy, no X-Forwarded-For. Runs on the io_context thread that
// created it; handlers run on that thread.
#pragma once

#include <cstddef>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "spotvisor/http/endpoint.hpp"
#include "spotvisor/http/tls.hpp"
#include "spotvisor/util/units.hpp"

namespace boost::asio {
class io_context;
}  // namespace boost::asio

namespace spotvisor::http {

// Why an exchange gave no usable answer. kNone: a response arrived (any status).
enum class HttpErrorKind {
  kNone,
  kRefused,      // connection refused: nothing listens there
  kUnreachable,  // no route to the host or network
  kTimeout,      // the deadline passed (silent, slow or trickling endpoint; IMDSv2 hop limit)
  kTooLarge,     // body or headers over the limit
  kGarbage,      // not HTTP, or a truncated message
  kClosed,       // the peer closed the connection without answering
  kBadStatus,    // an answer, but a status the caller did not expect (set by callers)
  kTls,          // TLS refused: the handshake, the certificate check or an alert from the peer
  kNetwork,      // any other socket or resolver failure
};

// "refused", "timeout", ... (stable words for logs).
const char* ToString(HttpErrorKind kind);

struct HttpHeader {
  std::string name;   // as sent
  std::string value;  // as sent
};

struct HttpRequest {
  std::string method = "GET";                  // GET, PUT, POST
  std::string target;                          // path and query, e.g. "/latest/api/token"
  std::vector<HttpHeader> headers;             // added to Host, User-Agent and Content-Length
  std::string body;                            // sent as is
  Duration timeout = std::chrono::seconds(2);  // deadline of the whole exchange
};

struct HttpResponse {
  int status = 0;
  std::string body;
  std::vector<HttpHeader> headers;
  // The value of header `name` (case-insensitive), or nullptr.
  const std::string* Header(std::string_view name) const;
};

struct HttpOutcome {
  HttpErrorKind error = HttpErrorKind::kNone;  // kNone: `response` holds the answer
  std::string message;                         // what happened, for logs (names the URL)
  std::string why;                             // the same without the request ("connect: Connection refused")
  HttpResponse response;
  bool ok() const { return error == HttpErrorKind::kNone; }
};

struct HttpLimits {
  std::size_t body_limit = 64 * 1024;    // bytes of body accepted
  std::size_t header_limit = 16 * 1024;  // bytes of status line + headers accepted
};

class HttpClient {
 public:
  using Handler = std::function<void(HttpOutcome)>;

  // `tls` is required for an https endpoint (every exchange fails with kTls without it).
  HttpClient(boost::asio::io_context& io, Endpoint endpoint, HttpLimits limits = {},
             std::shared_ptr<TlsContext> tls = nullptr);
  ~HttpClient();  // cancels; the pending handler is dropped
  HttpClient(const HttpClient&) = delete;
  HttpClient& operator=(const HttpClient&) = delete;

  // Starts one exchange; `done` runs exactly once on the io thread unless Cancel() (or the
  // destructor) comes first. A kept-alive connection is reused; if it turns out to have
  // been closed by the peer, the request is sent once more on a fresh connection.
  // Calling Send while an exchange is in flight fails that call with kNetwork.
  void Send(HttpRequest request, Handler done);
  // Abandons the exchange in flight (its handler never runs) and closes its connection.
  void Cancel();
  // True while an exchange is in flight.
  bool Busy() const;
  const Endpoint& endpoint() const;

 private:
  struct Impl;
  std::shared_ptr<Impl> impl_;  // shared with in-flight completion handlers
};

}  // namespace spotvisor::http

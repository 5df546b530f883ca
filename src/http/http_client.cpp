// HttpClient over Stream (stream.hpp, which holds Asio's sockets, TLS and Beast's
// operations). Each exchange and each connection is a shared object captured by its
// completion handlers, so Cancel() can drop both at any moment without a handler touching
// freed memory; a generation check keeps stale handlers quiet.
#include "spotvisor/http/http_client.hpp"

#include <boost/asio/io_context.hpp>
#include <boost/asio/post.hpp>
#include <boost/beast/core/error.hpp>
#include <boost/beast/core/string.hpp>
#include <boost/beast/http/error.hpp>
#include <optional>

#include "spotvisor/http/stream.hpp"

namespace spotvisor::http {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace beast_http = beast::http;  // not spotvisor::http
using error_code = boost::system::error_code;

const char* ToString(HttpErrorKind kind) {
  switch (kind) {
    case HttpErrorKind::kNone:
      return "none";
    case HttpErrorKind::kRefused:
      return "refused";
    case HttpErrorKind::kUnreachable:
      return "unreachable";
    case HttpErrorKind::kTimeout:
      return "timeout";
    case HttpErrorKind::kTooLarge:
      return "too_large";
    case HttpErrorKind::kGarbage:
      return "garbage";
    case HttpErrorKind::kClosed:
      return "closed";
    case HttpErrorKind::kBadStatus:
      return "bad_status";
    case HttpErrorKind::kTls:
      return "tls";
    case HttpErrorKind::kNetwork:
      return "network";
  }
  return "unknown";
}

const std::string* HttpResponse::Header(std::string_view name) const {
  for (const auto& h : headers) {
    if (beast::iequals(h.name, name)) return &h.value;
  }
  return nullptr;
}

// Named, not anonymous: HttpClient::Impl holds these, and a type with internal linkage
// inside a class with external linkage is refused in the core's unity batches.
namespace client_state {

// One connection (with its read buffer); shared by the exchanges that reuse it.
struct Connection {
  Connection(asio::io_context& io, const Endpoint& endpoint, std::shared_ptr<TlsContext> tls, std::size_t buffer_limit)
      : stream(io, endpoint, std::move(tls), {buffer_limit, false}) {}
  Stream stream;      // TCP, or TLS over TCP, with Beast's per-operation expiry
  bool used = false;  // carried an exchange before (so it may be stale)
};

// The state of one request/response exchange.
struct Exchange {
  std::uint64_t generation = 0;                                                // HttpClient::Impl::generation_ at Send
  beast_http::request<beast_http::string_body> message;                        // what is sent
  std::optional<beast_http::response_parser<beast_http::string_body>> parser;  // what is read
  std::shared_ptr<Connection> connection;                                      // the connection in use
  Stream::TimePoint deadline;                                                  // end of the whole exchange
  bool retried = false;  // already resent once on a fresh connection
  std::string target;    // for messages
};

}  // namespace client_state

using client_state::Connection;
using client_state::Exchange;

namespace {

HttpErrorKind Classify(const error_code& ec) {
  if (Stream::IsTlsError(ec)) return HttpErrorKind::kTls;
  if (ec == asio::error::connection_refused) return HttpErrorKind::kRefused;
  if (ec == asio::error::host_unreachable || ec == asio::error::network_unreachable) {
    return HttpErrorKind::kUnreachable;
  }
  if (ec == beast::error::timeout || ec == asio::error::timed_out) return HttpErrorKind::kTimeout;
  if (ec == beast_http::error::body_limit || ec == beast_http::error::header_limit ||
      ec == beast_http::error::buffer_overflow || ec == asio::error::no_buffer_space) {
    return HttpErrorKind::kTooLarge;
  }
  if (ec == beast_http::error::end_of_stream || ec == asio::error::eof || ec == asio::error::connection_reset ||
      ec == asio::error::broken_pipe) {
    return HttpErrorKind::kClosed;
  }
  if (ec.category() == beast_http::make_error_code(beast_http::error::partial_message).category()) {
    return HttpErrorKind::kGarbage;
  }
  return HttpErrorKind::kNetwork;
}

}  // namespace

struct HttpClient::Impl : std::enable_shared_from_this<Impl> {
  Impl(asio::io_context& io_context, Endpoint ep, HttpLimits l, std::shared_ptr<TlsContext> t)
      : io(io_context), endpoint(std::move(ep)), limits(l), tls(std::move(t)) {}

  asio::io_context& io;               // the thread everything runs on
  Endpoint endpoint;                  // where to connect
  HttpLimits limits;                  // body and header limits
  std::shared_ptr<TlsContext> tls;    // for an https endpoint
  std::shared_ptr<Connection> idle;   // a kept-alive connection ready for reuse
  std::shared_ptr<Exchange> current;  // the exchange in flight, if any
  Handler handler;                    // its completion handler
  std::uint64_t generation = 0;       // bumped by every Send and Cancel

  bool Stale(const std::shared_ptr<Exchange>& ex) const { return current != ex || ex->generation != generation; }

  std::shared_ptr<Connection> NewConnection() {
    return std::make_shared<Connection>(io, endpoint, tls, limits.header_limit + limits.body_limit + 8192);
  }

  void Start(const std::shared_ptr<Exchange>& ex) {
    if (idle && idle->stream.IsOpen()) {
      ex->connection = std::move(idle);
      idle.reset();
      Write(ex);
      return;
    }
    idle.reset();
    ex->connection = NewConnection();
    Connect(ex);
  }

  void Connect(const std::shared_ptr<Exchange>& ex) {
    auto self = shared_from_this();
    ex->connection->stream.Open(ex->deadline, [self, ex](const error_code& ec, const std::string& what) {
      if (self->Stale(ex)) return;
      if (ec) return self->Finish(ex, Classify(ec), what);
      self->Write(ex);
    });
  }

  void Write(const std::shared_ptr<Exchange>& ex) {
    auto self = shared_from_this();
    ex->connection->stream.ExpiresAt(ex->deadline);
    ex->connection->stream.Write(ex->message, [self, ex](const error_code& ec) {
      if (self->Stale(ex)) return;
      if (ec) return self->Fail(ex, ec, "write");
      self->Read(ex);
    });
  }

  void Read(const std::shared_ptr<Exchange>& ex) {
    auto self = shared_from_this();
    ex->parser.emplace();
    ex->parser->header_limit(static_cast<std::uint32_t>(limits.header_limit));
    ex->parser->body_limit(limits.body_limit);
    ex->connection->stream.ExpiresAt(ex->deadline);
    ex->connection->stream.Read(*ex->parser, [self, ex](const error_code& ec) {
      if (self->Stale(ex)) return;
      if (ec) return self->Fail(ex, ec, "read");
      self->Complete(ex);
    });
  }

  void Fail(const std::shared_ptr<Exchange>& ex, const error_code& ec, const char* step) {
    const bool nothing_read = !ex->parser || !ex->parser->got_some();
    const HttpErrorKind kind = Classify(ec);
    ex->connection->stream.Close();
    // A reused connection the peer had already closed: resend once on a fresh one.
    if (ex->connection->used && !ex->retried && nothing_read &&
        (kind == HttpErrorKind::kClosed || kind == HttpErrorKind::kNetwork)) {
      ex->retried = true;
      ex->parser.reset();
      ex->connection = NewConnection();
      Connect(ex);
      return;
    }
    std::string what = std::string(step) + ": " + ex->connection->stream.Explain(ec);
    if (ec == beast_http::error::partial_message) what = "truncated response: " + ec.message();
    if (kind == HttpErrorKind::kClosed && nothing_read) what = "closed without answering";
    Finish(ex, kind, what);
  }

  void Complete(const std::shared_ptr<Exchange>& ex) {
    auto message = ex->parser->release();
    HttpOutcome outcome;
    outcome.response.status = static_cast<int>(message.result_int());
    outcome.response.body = std::move(message.body());
    for (const auto& field : message) {
      outcome.response.headers.push_back({std::string(field.name_string()), std::string(field.value())});
    }
    auto connection = std::move(ex->connection);
    connection->used = true;
    // Reuse only a clean connection: kept alive and nothing unread left in the buffer.
    if (message.keep_alive() && connection->stream.Buffered() == 0) {
      idle = std::move(connection);
    } else {
      connection->stream.Close();
    }
    Deliver(ex, std::move(outcome));
  }

  void Finish(const std::shared_ptr<Exchange>& ex, HttpErrorKind kind, std::string what) {
    if (ex->connection) ex->connection->stream.Close();
    HttpOutcome outcome;
    outcome.error = kind;
    outcome.message = std::string(ex->message.method_string()) + " " + endpoint.url + ex->target + ": " + what;
    outcome.why = std::move(what);
    Deliver(ex, std::move(outcome));
  }

  void Deliver(const std::shared_ptr<Exchange>& ex, HttpOutcome outcome) {
    (void)ex;
    current.reset();
    Handler done = std::move(handler);
    handler = nullptr;
    if (done) done(std::move(outcome));
  }

  void Cancel() {
    ++generation;
    handler = nullptr;
    if (current && current->connection) current->connection->stream.Close();
    current.reset();
  }
};

HttpClient::HttpClient(asio::io_context& io, Endpoint endpoint, HttpLimits limits, std::shared_ptr<TlsContext> tls)
    : impl_(std::make_shared<Impl>(io, std::move(endpoint), limits, std::move(tls))) {}

HttpClient::~HttpClient() {
  impl_->Cancel();
  if (impl_->idle) impl_->idle->stream.Close();
  impl_->idle.reset();
}

void HttpClient::Send(HttpRequest request, Handler done) {
  auto& impl = *impl_;
  if (impl.current) {
    asio::post(impl.io, [done = std::move(done), url = impl.endpoint.url + request.target] {
      HttpOutcome outcome;
      outcome.error = HttpErrorKind::kNetwork;
      outcome.message = url + ": another request is still in flight";
      done(std::move(outcome));
    });
    return;
  }
  auto ex = std::make_shared<Exchange>();
  ex->generation = ++impl.generation;
  ex->target = request.target;
  ex->deadline = Stream::TimePoint::clock::now() + request.timeout;
  const beast_http::verb verb = beast_http::string_to_verb(request.method);
  ex->message = beast_http::request<beast_http::string_body>(
      verb == beast_http::verb::unknown ? beast_http::verb::get : verb, request.target, 11);
  ex->message.set(beast_http::field::host, impl.endpoint.host_header);
  ex->message.set(beast_http::field::user_agent, "spotvisor/" SPOTVISOR_VERSION);
  for (auto& h : request.headers) ex->message.set(h.name, h.value);
  ex->message.body() = std::move(request.body);
  ex->message.prepare_payload();
  ex->message.keep_alive(true);
  impl.current = ex;
  impl.handler = std::move(done);
  impl.Start(ex);
}

void HttpClient::Cancel() { impl_->Cancel(); }

bool HttpClient::Busy() const { return impl_->current != nullptr; }

const Endpoint& HttpClient::endpoint() const { return impl_->endpoint; }

}  // namespace spotvisor::http

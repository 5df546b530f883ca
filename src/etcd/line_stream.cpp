// Beast implementation of LineStream; the only translation unit of the etcd module with
// Asio and Beast. The Impl is shared with its completion handlers; `closed` (set by the
// destructor or after `ended`) keeps late handlers and code after a handler quiet.
#include "line_stream.hpp"

#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>

#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/address.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/core/tcp_stream.hpp>
#include <boost/beast/http.hpp>

#include "spotvisor/etcd/wire.hpp"

namespace spotvisor::etcd {
namespace {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace bhttp = beast::http;
using tcp = asio::ip::tcp;
using error_code = boost::system::error_code;

constexpr std::size_t kMaxLine = 16 * 1024 * 1024;  // one watch answer; etcd's are far smaller
constexpr std::size_t kMaxErrorBody = 64 * 1024;    // the body of a refusal

// A silent peer (a VM gone without a FIN) is found in about 5 + 3 * 2 s.
void KeepAlive(tcp::socket& socket) {
  error_code ignored;
  socket.set_option(asio::socket_base::keep_alive(true), ignored);
  socket.set_option(tcp::no_delay(true), ignored);
  const int idle = 5;
  const int interval = 2;
  const int count = 3;
  const int fd = socket.native_handle();
  (void)setsockopt(fd, IPPROTO_TCP, TCP_KEEPIDLE, &idle, sizeof idle);
  (void)setsockopt(fd, IPPROTO_TCP, TCP_KEEPINTVL, &interval, sizeof interval);
  (void)setsockopt(fd, IPPROTO_TCP, TCP_KEEPCNT, &count, sizeof count);
}

}  // namespace

struct LineStream::Impl : std::enable_shared_from_this<Impl> {
  Impl(asio::io_context& io, Member m, LineStreamRequest r, Handlers h)
      : member(std::move(m)), request(std::move(r)), handlers(std::move(h)), resolver(io), timer(io), stream(io) {}

  Member member;                                      // where
  LineStreamRequest request;                          // what
  Handlers handlers;                                  // the owner's
  tcp::resolver resolver;                             // for host names
  asio::steady_timer timer;                           // bounds the resolver
  beast::tcp_stream stream;                           // the connection
  beast::flat_buffer buffer;                          // bytes read, not yet parsed
  bhttp::request<bhttp::string_body> message;         // what is sent
  bhttp::response_parser<bhttp::string_body> parser;  // the answer; its body holds unread lines
  asio::steady_timer::time_point deadline;            // of the opening
  bool opened = false;                                // the 200 head arrived
  bool closed = false;                                // ended or destroyed: handlers stay quiet

  void Start() {
    deadline = asio::steady_timer::clock_type::now() + request.open_timeout;
    error_code ec;
    const auto address = asio::ip::make_address(member.host, ec);
    if (!ec) return Connect({tcp::endpoint(address, member.port)});
    auto self = shared_from_this();
    timer.expires_at(deadline);
    timer.async_wait([self](const error_code& wait_ec) {
      if (!wait_ec) self->resolver.cancel();
    });
    resolver.async_resolve(member.host, std::to_string(member.port),
                           [self](const error_code& rec, const tcp::resolver::results_type& results) {
                             self->timer.cancel();
                             if (self->closed) return;
                             if (rec) return self->End("cannot resolve " + self->member.host + ": " + rec.message());
                             self->Connect({results.begin(), results.end()});
                           });
  }

  void Connect(const std::vector<tcp::endpoint>& endpoints) {
    auto self = shared_from_this();
    stream.expires_at(deadline);
    stream.async_connect(endpoints, [self](const error_code& ec, const tcp::endpoint&) {
      if (self->closed) return;
      if (ec) return self->End("connect: " + ec.message());
      KeepAlive(self->stream.socket());
      self->Write();
    });
  }

  void Write() {
    message = {bhttp::verb::post, request.target, 11};
    message.set(bhttp::field::host, member.host_header);
    message.set(bhttp::field::user_agent, "spotvisor/" SPOTVISOR_VERSION);
    message.set(bhttp::field::content_type, "application/json");
    for (const auto& [name, value] : request.headers) message.set(name, value);
    message.body() = request.body;
    message.prepare_payload();
    auto self = shared_from_this();
    bhttp::async_write(stream, message, [self](const error_code& ec, std::size_t) {
      if (self->closed) return;
      if (ec) return self->End("write: " + ec.message());
      self->ReadHead();
    });
  }

  void ReadHead() {
    parser.body_limit(boost::none);  // a stream: lines are bounded one by one instead
    auto self = shared_from_this();
    bhttp::async_read_header(stream, buffer, parser, [self](const error_code& ec, std::size_t) {
      if (self->closed) return;
      if (ec) return self->End("read: " + ec.message());
      if (self->parser.get().result_int() != 200) return self->ReadRefusal();
      self->opened = true;
      self->stream.expires_never();
      if (self->handlers.opened) self->handlers.opened();
      if (self->closed) return;
      self->Drain();
      self->ReadMore();
    });
  }

  void ReadRefusal() {
    parser.body_limit(kMaxErrorBody);
    auto self = shared_from_this();
    bhttp::async_read(stream, buffer, parser, [self](const error_code& ec, std::size_t) {
      if (self->closed) return;
      const auto& body = self->parser.get().body();
      std::string why = "HTTP status " + std::to_string(self->parser.get().result_int());
      if (const auto err = ParseGatewayError(body)) {
        why = err->message + " (code " + std::to_string(err->code) + ")";
      } else if (ec) {
        why += " (" + ec.message() + ")";
      }
      self->End(why);
    });
  }

  void ReadMore() {
    auto self = shared_from_this();
    bhttp::async_read_some(stream, buffer, parser, [self](const error_code& ec, std::size_t) {
      if (self->closed) return;
      self->Drain();
      if (self->closed) return;
      if (ec) return self->End("connection lost: " + ec.message());
      if (self->parser.is_done()) return self->End("the server ended the stream");
      if (self->parser.get().body().size() > kMaxLine) return self->End("a line longer than 16 MiB");
      self->ReadMore();
    });
  }

  // Hands over every complete line of the body read so far.
  void Drain() {
    auto& body = parser.get().body();
    std::size_t begin = 0;
    for (auto end = body.find('\n'); end != std::string::npos; end = body.find('\n', begin)) {
      const std::string line = body.substr(begin, end - begin);
      begin = end + 1;
      if (line.find_first_not_of(" \r\t") == std::string::npos) continue;
      handlers.line(line);
      if (closed) return;
    }
    body.erase(0, begin);
  }

  void End(std::string why) {
    if (closed) return;
    closed = true;
    error_code ignored;
    stream.socket().close(ignored);
    auto ended = std::move(handlers.ended);
    if (ended) ended(opened, "POST " + member.url + request.target + ": " + why);
  }

  void Close() {
    closed = true;
    resolver.cancel();
    timer.cancel();
    error_code ignored;
    stream.socket().close(ignored);
  }
};

LineStream::LineStream(asio::io_context& io, Member member, LineStreamRequest request, Handlers handlers)
    : impl_(std::make_shared<Impl>(io, std::move(member), std::move(request), std::move(handlers))) {}

LineStream::~LineStream() { impl_->Close(); }

void LineStream::Start() { impl_->Start(); }

}  // namespace spotvisor::etcd

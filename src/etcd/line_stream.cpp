// LineStream over http::Stream (which holds the sockets, TLS and Beast's operations). The
// Impl is shared with its completion handlers; `closed` (set by the destructor or after
// `ended`) keeps late handlers and code after a handler quiet.
#include "line_stream.hpp"

#include <boost/asio/io_context.hpp>

#include "spotvisor/etcd/wire.hpp"
#include "spotvisor/http/stream.hpp"

namespace spotvisor::etcd {
namespace {

namespace bhttp = boost::beast::http;
using error_code = boost::system::error_code;

constexpr std::size_t kMaxLine = 16 * 1024 * 1024;  // one watch answer; etcd's are far smaller
constexpr std::size_t kMaxErrorBody = 64 * 1024;    // the body of a refusal
constexpr std::size_t kReadAhead = 64 * 1024;       // bytes read ahead of the parser

}  // namespace

struct LineStream::Impl : std::enable_shared_from_this<Impl> {
  Impl(boost::asio::io_context& io, Member m, std::shared_ptr<http::TlsContext> tls, LineStreamRequest r, Handlers h)
      : member(m),
        request(std::move(r)),
        handlers(std::move(h)),
        stream(io, std::move(m), std::move(tls), {kReadAhead, true}) {}

  Member member;                                      // where
  LineStreamRequest request;                          // what
  Handlers handlers;                                  // the owner's
  http::Stream stream;                                // the connection, with TCP keepalive probes
  bhttp::request<bhttp::string_body> message;         // what is sent
  bhttp::response_parser<bhttp::string_body> parser;  // the answer; its body holds unread lines
  bool opened = false;                                // the 200 head arrived
  bool closed = false;                                // ended or destroyed: handlers stay quiet

  void Start() {
    auto self = shared_from_this();
    // Real time, as the socket's own: the deadline bounds a connect on a real socket.
    const auto deadline = http::Stream::TimePoint::clock::now() + request.open_timeout;
    stream.Open(deadline, [self, deadline](const error_code& ec, const std::string& what) {
      if (self->closed) return;
      if (ec) return self->End(what);
      self->stream.ExpiresAt(deadline);
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
    stream.Write(message, [self](const error_code& ec) {
      if (self->closed) return;
      if (ec) return self->End("write: " + self->stream.Explain(ec));
      self->ReadHead();
    });
  }

  void ReadHead() {
    parser.body_limit(boost::none);  // a stream: lines are bounded one by one instead
    auto self = shared_from_this();
    stream.ReadHeader(parser, [self](const error_code& ec) {
      if (self->closed) return;
      if (ec) return self->End("read: " + self->stream.Explain(ec));
      if (self->parser.get().result_int() != 200) return self->ReadRefusal();
      self->opened = true;
      self->stream.ExpiresNever();
      if (self->handlers.opened) self->handlers.opened();
      if (self->closed) return;
      self->Drain();
      self->ReadMore();
    });
  }

  void ReadRefusal() {
    parser.body_limit(kMaxErrorBody);
    auto self = shared_from_this();
    stream.Read(parser, [self](const error_code& ec) {
      if (self->closed) return;
      const auto& body = self->parser.get().body();
      std::string why = "HTTP status " + std::to_string(self->parser.get().result_int());
      if (const auto err = ParseGatewayError(body)) {
        why = err->message + " (code " + std::to_string(err->code) + ")";
      } else if (ec) {
        why += " (" + self->stream.Explain(ec) + ")";
      }
      self->End(why);
    });
  }

  void ReadMore() {
    auto self = shared_from_this();
    stream.ReadSome(parser, [self](const error_code& ec) {
      if (self->closed) return;
      self->Drain();
      if (self->closed) return;
      if (ec) return self->End("connection lost: " + self->stream.Explain(ec));
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
    stream.Close();
    auto ended = std::move(handlers.ended);
    if (ended) ended(opened, "POST " + member.url + request.target + ": " + why);
  }

  void Close() {
    closed = true;
    stream.Close();
  }
};

LineStream::LineStream(boost::asio::io_context& io, Member member, std::shared_ptr<http::TlsContext> tls,
                       LineStreamRequest request, Handlers handlers)
    : impl_(std::make_shared<Impl>(io, std::move(member), std::move(tls), std::move(request), std::move(handlers))) {}

LineStream::~LineStream() { impl_->Close(); }

void LineStream::Start() { impl_->Start(); }

}  // namespace spotvisor::etcd

// The socket half of the mock metadata server (Beast): accepts connections, parses
// requests under limits, routes control paths, asks the provider's MockService for the
// reply, and holds GCP long-polls until a flip or their timeout. Each connection is a
// shared Session captured by its handlers; Stop() closes them all by cancelling.
// The only translation unit of the mock module that includes Asio and Beast.
#include "spotvisor/mock/mock_metadata_server.hpp"

#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/write.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/core/tcp_stream.hpp>
#include <boost/beast/http.hpp>
#include <cctype>
#include <list>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>

#include "mock_service.hpp"
#include "spotvisor/telemetry/log.hpp"

namespace spotvisor::mock {

using telemetry::Log;
using telemetry::LogLevel;
using telemetry::Quote;

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using tcp = asio::ip::tcp;
using error_code = boost::system::error_code;

namespace {

constexpr std::uint32_t kHeaderLimit = 16 * 1024;
constexpr std::uint64_t kBodyLimit = 64 * 1024;
constexpr std::chrono::seconds kIdleTimeout{60};  // a kept-alive connection with no request
constexpr std::string_view kControl = "/__spotvisor/";

std::string PercentDecode(std::string_view s) {
  std::string out;
  for (std::size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '+') {
      out.push_back(' ');
    } else if (s[i] == '%' && i + 2 < s.size() &&
               std::isxdigit(static_cast<unsigned char>(s[i + 1])) &&
               std::isxdigit(static_cast<unsigned char>(s[i + 2]))) {
      out.push_back(static_cast<char>(std::stoi(std::string(s.substr(i + 1, 2)), nullptr, 16)));
      i += 2;
    } else {
      out.push_back(s[i]);
    }
  }
  return out;
}

MockRequest ToMockRequest(const http::request<http::string_body>& message) {
  MockRequest request;
  request.method = std::string(message.method_string());
  const std::string_view target(message.target().data(), message.target().size());
  const auto question = target.find('?');
  request.path = PercentDecode(target.substr(0, question));
  // "//latest/meta-data/..." (a client joining "http://host/" and "/latest/...") is the
  // same path to the real services.
  for (auto at = request.path.find("//"); at != std::string::npos; at = request.path.find("//")) {
    request.path.erase(at, 1);
  }
  if (question != std::string_view::npos) {
    std::string_view query = target.substr(question + 1);
    while (!query.empty()) {
      const auto amp = query.find('&');
      const std::string_view pair = query.substr(0, amp);
      const auto eq = pair.find('=');
      request.query[PercentDecode(pair.substr(0, eq))] =
          eq == std::string_view::npos ? "" : PercentDecode(pair.substr(eq + 1));
      if (amp == std::string_view::npos) break;
      query.remove_prefix(amp + 1);
    }
  }
  for (const auto& field : message) {
    std::string name(field.name_string());
    for (char& c : name) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    request.headers[name] = std::string(field.value());
  }
  request.body = message.body();
  return request;
}

}  // namespace

class Session;

// The server's state, shared by the public object and every connection.
struct ServerCore : std::enable_shared_from_this<ServerCore> {
  ServerCore(asio::io_context& io_context, MockProvider p, MockOptions o)
      : io(io_context),
        provider(p),
        options(std::move(o)),
        service(MakeMockService(p, options)),
        acceptor(io_context),
        preempt_timer(io_context) {}

  void Accept();
  FlapPhase Phase() const;
  std::optional<Duration> FlapLeft() const;  // of the current phase, while flapping
  void Route(const std::shared_ptr<Session>& session, MockRequest request, bool keep_alive);
  MockReply Control(const MockRequest& request);
  void Flip();  // the state changed: answer held long-polls whose answer changed
  void DoPreempt(const PreemptSpec& spec);
  void DoClear();
  std::string StateJson() const;

  asio::io_context& io;                              // the one thread everything runs on
  MockProvider provider;                             // which service
  MockOptions options;                               // from the command line or the test
  std::unique_ptr<MockService> service;              // the protocol
  tcp::acceptor acceptor;                            // the listening socket
  asio::steady_timer preempt_timer;                  // --preempt-after
  std::list<std::weak_ptr<Session>> sessions;        // open connections, for Stop and Flip
  std::uint64_t request_count = 0;                   // metadata requests served
  std::map<std::string, std::uint64_t> path_counts;  // requests per path
  std::uint16_t bound_port = 0;                      // the port Start bound
  std::chrono::steady_clock::time_point started{};   // by Start, for flapping
  bool running = false;                              // between Start and Stop
};

// One accepted connection: read a request, answer (maybe after holding it), repeat.
class Session : public std::enable_shared_from_this<Session> {
 public:
  Session(tcp::socket socket, std::weak_ptr<ServerCore> server)
      : stream_(std::move(socket)),
        hold_timer_(stream_.get_executor()),
        server_(std::move(server)) {}

  void Read() {
    parser_.emplace();
    parser_->header_limit(kHeaderLimit);
    parser_->body_limit(kBodyLimit);
    stream_.expires_after(kIdleTimeout);
    http::async_read(
        stream_, buffer_, *parser_,
        [self = shared_from_this()](const error_code& ec, std::size_t) { self->OnRead(ec); });
  }

  void Reply(MockReply reply, bool keep_alive) {
    held_.reset();
    hold_timer_.cancel();
    response_ = {};
    response_.version(11);
    response_.result(static_cast<unsigned>(reply.status));
    response_.set(http::field::server, "spotvisor-mock");
    for (auto& [name, value] : reply.headers) response_.set(name, value);
    response_.body() = std::move(reply.body);
    response_.keep_alive(keep_alive);
    response_.prepare_payload();
    stream_.expires_after(std::chrono::seconds(30));
    http::async_write(stream_, response_,
                      [self = shared_from_this(), keep_alive](const error_code& ec, std::size_t) {
                        if (ec || !keep_alive) return self->Close();
                        self->Read();
                      });
  }

  // Keeps `request` until Wake finds a different answer or `hold_for` passes.
  void Hold(MockRequest request, bool keep_alive, Duration hold_for) {
    held_ = std::move(request);
    held_keep_alive_ = keep_alive;
    stream_.expires_never();
    hold_timer_.expires_after(hold_for);
    hold_timer_.async_wait([self = shared_from_this()](const error_code& ec) {
      if (ec || !self->held_) return;
      self->held_->answer_now = true;
      self->Wake();
    });
    // Notice a client that hangs up while we hold its request.
    stream_.socket().async_wait(tcp::socket::wait_read,
                                [self = shared_from_this()](const error_code& ec) {
                                  if (ec || !self->held_) return;
                                  error_code avail_ec;
                                  if (self->stream_.socket().available(avail_ec) == 0 || avail_ec)
                                    self->Close();
                                });
  }

  // Re-asks the service for a held request; answers if it has something to say now.
  void Wake() {
    if (!held_) return;
    auto server = server_.lock();
    if (!server) return Close();
    MockReply reply = server->service->Handle(*held_);
    if (reply.hold) return;
    error_code ignored;
    stream_.socket().cancel(ignored);  // the hang-up watch
    Reply(std::move(reply), held_keep_alive_);
  }

  // Writes `bytes` as they are (no HTTP framing), then hangs up.
  void WriteRaw(std::string bytes) {
    raw_ = std::move(bytes);
    stream_.expires_after(std::chrono::seconds(30));
    asio::async_write(stream_, asio::buffer(raw_),
                      [self = shared_from_this()](const error_code&, std::size_t) { self->Close(); });
  }

  // Reads nothing more and answers nothing for `quiet`, then hangs up.
  void Ignore(Duration quiet) {
    stream_.expires_never();
    hold_timer_.expires_after(quiet);
    hold_timer_.async_wait([self = shared_from_this()](const error_code& ec) {
      if (!ec) self->Close();
    });
  }

  void Close() {
    held_.reset();
    hold_timer_.cancel();
    error_code ignored;
    stream_.socket().shutdown(tcp::socket::shutdown_both, ignored);
    stream_.close();
  }

 private:
  void OnRead(const error_code& ec) {
    if (ec == http::error::end_of_stream || ec == asio::error::operation_aborted) return Close();
    auto server = server_.lock();
    if (!server) return Close();
    if (ec) {
      if (parser_ && parser_->got_some()) {
        Reply(TextReply(400, "bad request: " + ec.message() + "\n"), false);
      } else {
        Close();
      }
      return;
    }
    const auto& message = parser_->get();
    server->Route(shared_from_this(), ToMockRequest(message), message.keep_alive());
  }

  beast::tcp_stream stream_;                                       // the connection
  beast::flat_buffer buffer_;                                      // bytes read ahead
  std::optional<http::request_parser<http::string_body>> parser_;  // the request being read
  http::response<http::string_body> response_;                     // the answer being written
  asio::steady_timer hold_timer_;     // timeout_sec of a held long-poll
  std::optional<MockRequest> held_;   // the long-poll being held
  std::string raw_;                   // bytes of WriteRaw in flight
  bool held_keep_alive_ = true;       // its keep-alive
  std::weak_ptr<ServerCore> server_;  // gone after the server is destroyed
};

void ServerCore::Accept() {
  acceptor.async_accept([self = shared_from_this()](const error_code& ec, tcp::socket socket) {
    if (!self->running) return;
    if (!ec) {
      error_code ignored;  // answers are small and latency is the point
      socket.set_option(tcp::no_delay(true), ignored);
      auto session = std::make_shared<Session>(std::move(socket), self);
      self->sessions.remove_if([](const std::weak_ptr<Session>& s) { return s.expired(); });
      self->sessions.push_back(session);
      session->Read();
    }
    self->Accept();
  });
}

void ServerCore::Route(const std::shared_ptr<Session>& session, MockRequest request,
                       bool keep_alive) {
  if (request.path.rfind(kControl, 0) == 0) {
    session->Reply(Control(request), keep_alive);
    return;
  }
  ++request_count;
  ++path_counts[request.path];
  switch (Phase()) {
    case FlapPhase::kHealthy:
      break;
    case FlapPhase::kDropped:
      return session->Close();
    case FlapPhase::kSilent:
      return session->Ignore(*options.flap);
    case FlapPhase::kGarbage:
      return session->Reply(TextReply(200, "<html><body>Welcome to the hotel network\x01\x02</body></html>",
                                      "text/html"),
                            false);
    case FlapPhase::kUnavailable:
      return session->Reply(TextReply(503, "Service Unavailable\n"), false);
    case FlapPhase::kNotHttp:
      return session->WriteRaw("SSH-2.0-OpenSSH_9.2\r\n\x01\x02\x03 not http\r\n\r\n");
  }
  MockReply reply = service->Handle(request);
  Log(LogLevel::kDebug, "event=mock_request provider=" + std::string(ToString(provider)) + " method=" +
                            Quote(request.method) + " path=" + Quote(request.path) +
                            " status=" + std::to_string(reply.hold ? 0 : reply.status));
  if (reply.hold) {
    // A flapping service does not hold a long-poll past its phase: the next one misbehaves.
    const auto left = FlapLeft();
    session->Hold(std::move(request), keep_alive, left ? std::min(*left, reply.hold_for) : reply.hold_for);
  } else {
    session->Reply(std::move(reply), keep_alive);
  }
}

MockReply ServerCore::Control(const MockRequest& request) {
  const std::string action = request.path.substr(kControl.size());
  if (action == "state" && request.method == "GET") {
    return TextReply(200, StateJson(), "application/json");
  }
  if (request.method != "POST") return TextReply(405, "use POST\n");
  if (action == "preempt") {
    auto spec = ParsePreemptSpec(request.body);
    if (!spec) return TextReply(400, spec.error().message + "\n");
    DoPreempt(*spec);
    return TextReply(200, StateJson(), "application/json");
  }
  if (action == "clear") {
    DoClear();
    return TextReply(200, StateJson(), "application/json");
  }
  return TextReply(404, "unknown control path\n");
}

FlapPhase ServerCore::Phase() const {
  if (!options.flap || options.flap->count() <= 0) return FlapPhase::kHealthy;
  const auto elapsed = std::chrono::duration_cast<Duration>(std::chrono::steady_clock::now() - started);
  if (options.flap_for && elapsed >= *options.flap_for) return FlapPhase::kHealthy;
  constexpr int kPhases = static_cast<int>(FlapPhase::kNotHttp) + 1;
  return static_cast<FlapPhase>((elapsed / *options.flap) % kPhases);
}

std::optional<Duration> ServerCore::FlapLeft() const {
  if (!options.flap || options.flap->count() <= 0) return std::nullopt;
  const auto elapsed = std::chrono::duration_cast<Duration>(std::chrono::steady_clock::now() - started);
  if (options.flap_for && elapsed >= *options.flap_for) return std::nullopt;
  return *options.flap - elapsed % *options.flap;
}

const char* ToString(FlapPhase phase) {
  switch (phase) {
    case FlapPhase::kHealthy:
      return "healthy";
    case FlapPhase::kDropped:
      return "dropped";
    case FlapPhase::kSilent:
      return "silent";
    case FlapPhase::kGarbage:
      return "garbage";
    case FlapPhase::kUnavailable:
      return "unavailable";
    case FlapPhase::kNotHttp:
      return "not_http";
  }
  return "?";
}

void ServerCore::DoPreempt(const PreemptSpec& spec) {
  service->Preempt(spec);
  Log(LogLevel::kInfo, "event=mock_preempt provider=" + std::string(ToString(provider)));
  Flip();
}

void ServerCore::DoClear() {
  service->Clear();
  Log(LogLevel::kInfo, "event=mock_clear provider=" + std::string(ToString(provider)));
  Flip();
}

void ServerCore::Flip() {
  for (auto& weak : sessions) {
    if (auto session = weak.lock()) session->Wake();
  }
}

std::string ServerCore::StateJson() const {
  return nlohmann::json{{"provider", ToString(provider)},
                        {"preempted", service->preempted()},
                        {"requests", request_count},
                        {"flap_phase", ToString(Phase())},
                        {"acknowledged", service->acknowledged()}}
      .dump();
}

struct MockMetadataServer::Impl : ServerCore {
  using ServerCore::ServerCore;
};

MockMetadataServer::MockMetadataServer(asio::io_context& io, MockProvider provider,
                                       MockOptions options)
    : impl_(std::make_shared<Impl>(io, provider, std::move(options))) {}

MockMetadataServer::~MockMetadataServer() { Stop(); }

Result<std::uint16_t> MockMetadataServer::Start() {
  auto& impl = *impl_;
  error_code ec;
  const auto address = asio::ip::make_address(impl.options.listen_host, ec);
  if (ec) return Error{"--listen: '" + impl.options.listen_host + "' is not an IP address"};
  const tcp::endpoint endpoint(address, impl.options.listen_port);
  impl.acceptor.open(endpoint.protocol(), ec);
  if (!ec) impl.acceptor.set_option(asio::socket_base::reuse_address(true), ec);
  if (!ec) impl.acceptor.bind(endpoint, ec);
  if (!ec) impl.acceptor.listen(asio::socket_base::max_listen_connections, ec);
  if (ec) {
    return Error{"cannot listen on " + impl.options.listen_host + ":" +
                 std::to_string(impl.options.listen_port) + ": " + ec.message()};
  }
  impl.bound_port = impl.acceptor.local_endpoint().port();
  impl.started = std::chrono::steady_clock::now();
  impl.running = true;
  impl.Accept();
  if (impl.options.preempt_after) {
    impl.preempt_timer.expires_after(*impl.options.preempt_after);
    impl.preempt_timer.async_wait(
        [weak = std::weak_ptr<ServerCore>(impl_)](const error_code& wait_ec) {
          auto self = weak.lock();
          if (!wait_ec && self && self->running) self->DoPreempt({});
        });
  }
  Log(LogLevel::kInfo, "event=mock_listening provider=" + std::string(ToString(impl.provider)) + " url=" +
                           Quote("http://" + impl.options.listen_host + ":" + std::to_string(impl.bound_port)));
  return impl.bound_port;
}

void MockMetadataServer::Preempt(const PreemptSpec& spec) { impl_->DoPreempt(spec); }

void MockMetadataServer::Clear() { impl_->DoClear(); }

void MockMetadataServer::Stop() {
  auto& impl = *impl_;
  if (!impl.running) return;
  impl.running = false;
  error_code ignored;
  impl.acceptor.close(ignored);
  impl.preempt_timer.cancel();
  for (auto& weak : impl.sessions) {
    if (auto session = weak.lock()) session->Close();
  }
  impl.sessions.clear();
}

bool MockMetadataServer::preempted() const { return impl_->service->preempted(); }

std::uint16_t MockMetadataServer::port() const { return impl_->bound_port; }

std::uint64_t MockMetadataServer::requests() const { return impl_->request_count; }

std::uint64_t MockMetadataServer::requests_to(std::string_view path) const {
  const auto it = impl_->path_counts.find(std::string(path));
  return it == impl_->path_counts.end() ? 0 : it->second;
}

std::vector<std::string> MockMetadataServer::acknowledged() const {
  return impl_->service->acknowledged();
}

FlapPhase MockMetadataServer::flap_phase() const { return impl_->Phase(); }

std::string MockMetadataServer::url() const {
  return "http://" + impl_->options.listen_host + ":" + std::to_string(impl_->bound_port);
}

}  // namespace spotvisor::mock

// The socket half of the mock metadata server (Beast): accepts connections, parses
// requests under limits, hands each to ServerCore::Route, writes the replies, and holds GCP
// long-polls until a flip or their timeout. Each connection is a shared Session captured by
// its handlers; Stop() closes them all by cancelling.
// The only translation unit of the mock module that includes Beast.
#include <boost/asio/write.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/core/tcp_stream.hpp>
#include <boost/beast/http.hpp>
#include <cctype>
#include <optional>

#include "mock_server_core.hpp"

namespace spotvisor::mock {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using tcp = asio::ip::tcp;
using error_code = boost::system::error_code;

namespace {

constexpr std::uint32_t kHeaderLimit = 16 * 1024;
constexpr std::uint64_t kBodyLimit = 64 * 1024;
constexpr std::chrono::seconds kIdleTimeout{60};  // a kept-alive connection with no request

std::string PercentDecode(std::string_view s) {
  std::string out;
  for (std::size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '+') {
      out.push_back(' ');
    } else if (s[i] == '%' && i + 2 < s.size() && std::isxdigit(static_cast<unsigned char>(s[i + 1])) &&
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

// One accepted connection: read a request, answer (maybe after holding it), repeat.
class Session : public MockConnection, public std::enable_shared_from_this<Session> {
 public:
  Session(tcp::socket socket, std::weak_ptr<ServerCore> server)
      : stream_(std::move(socket)), hold_timer_(stream_.get_executor()), server_(std::move(server)) {}

  void Read() {
    parser_.emplace();
    parser_->header_limit(kHeaderLimit);
    parser_->body_limit(kBodyLimit);
    stream_.expires_after(kIdleTimeout);
    http::async_read(stream_, buffer_, *parser_,
                     [self = shared_from_this()](const error_code& ec, std::size_t) { self->OnRead(ec); });
  }

  void Reply(MockReply reply, bool keep_alive) override {
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
    http::async_write(stream_, response_, [self = shared_from_this(), keep_alive](const error_code& ec, std::size_t) {
      if (ec || !keep_alive) return self->Close();
      self->Read();
    });
  }

  // Keeps `request` until Wake finds a different answer or `hold_for` passes.
  void Hold(MockRequest request, bool keep_alive, Duration hold_for) override {
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
    stream_.socket().async_wait(tcp::socket::wait_read, [self = shared_from_this()](const error_code& ec) {
      if (ec || !self->held_) return;
      error_code avail_ec;
      if (self->stream_.socket().available(avail_ec) == 0 || avail_ec) self->Close();
    });
  }

  // Re-asks the service for a held request; answers if it has something to say now.
  void Wake() override {
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
  void WriteRaw(std::string bytes) override {
    raw_ = std::move(bytes);
    stream_.expires_after(std::chrono::seconds(30));
    asio::async_write(stream_, asio::buffer(raw_),
                      [self = shared_from_this()](const error_code&, std::size_t) { self->Close(); });
  }

  // Reads nothing more and answers nothing for `quiet`, then hangs up.
  void Ignore(Duration quiet) override {
    stream_.expires_never();
    hold_timer_.expires_after(quiet);
    hold_timer_.async_wait([self = shared_from_this()](const error_code& ec) {
      if (!ec) self->Close();
    });
  }

  void Close() override {
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
  asio::steady_timer hold_timer_;                                  // timeout_sec of a held long-poll
  std::optional<MockRequest> held_;                                // the long-poll being held
  std::string raw_;                                                // bytes of WriteRaw in flight
  bool held_keep_alive_ = true;                                    // its keep-alive
  std::weak_ptr<ServerCore> server_;                               // gone after the server is destroyed
};

}  // namespace

void ServerCore::Accept() {
  acceptor.async_accept([self = shared_from_this()](const error_code& ec, tcp::socket socket) {
    if (!self->running) return;
    if (!ec) {
      error_code ignored;  // answers are small and latency is the point
      socket.set_option(tcp::no_delay(true), ignored);
      auto session = std::make_shared<Session>(std::move(socket), self);
      self->connections.remove_if([](const std::weak_ptr<MockConnection>& c) { return c.expired(); });
      self->connections.push_back(session);
      session->Read();
    }
    self->Accept();
  });
}

}  // namespace spotvisor::mock

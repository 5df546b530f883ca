// Beast HTTP server for /metrics; see metrics_server.hpp. The only Beast user in
// telemetry: keep it here. Connections share `State`, so a closing server can reach them.
#include "spotvisor/telemetry/metrics_server.hpp"

#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <list>

#include "spotvisor/util/secret_file.hpp"

namespace spotvisor::telemetry {
namespace {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using tcp = asio::ip::tcp;

constexpr auto kRequestDeadline = std::chrono::seconds(5);
constexpr std::size_t kHeaderLimit = 8 * 1024;
constexpr std::size_t kBodyLimit = 1024;
constexpr std::size_t kMaxConnections = 16;

}  // namespace

Result<MetricsEndpoint> CheckMetricsConfig(const config::MetricsSection& metrics) {
  MetricsEndpoint e;
  const std::string& listen = metrics.listen;
  const auto colon = listen.rfind(':');
  if (colon == std::string::npos || colon + 1 == listen.size()) {
    return Error{"telemetry.metrics.listen: '" + listen + "' is not host:port (e.g. 127.0.0.1:9187)"};
  }
  std::string host = listen.substr(0, colon);
  if (host.size() >= 2 && host.front() == '[' && host.back() == ']') host = host.substr(1, host.size() - 2);
  if (host.empty() || host == "localhost") host = "127.0.0.1";
  const std::string port_text = listen.substr(colon + 1);
  unsigned long port = 0;
  try {
    std::size_t used = 0;
    port = std::stoul(port_text, &used);
    if (used != port_text.size() || port > 65535) throw std::out_of_range("port");
  } catch (const std::exception&) {
    return Error{"telemetry.metrics.listen: '" + port_text + "' is not a port number (0..65535)"};
  }
  boost::system::error_code ec;
  const auto address = asio::ip::make_address(host, ec);
  if (ec) return Error{"telemetry.metrics.listen: '" + host + "' is not an IP address (use e.g. 127.0.0.1 or [::1])"};
  e.host = address.to_string();
  e.port = static_cast<unsigned short>(port);
  e.loopback = address.is_loopback();
  if (metrics.token_file) {
    auto token = ReadSecretFile(*metrics.token_file, "metrics token");
    if (!token) return Error{"telemetry.metrics.token_file: " + token.error().message};
    e.token = std::move(*token);
  }
  if (!e.loopback && e.token.empty()) {
    return Error{"telemetry.metrics.listen: " + listen +
                 " is not a loopback address; metrics are never exposed without authentication: set "
                 "telemetry.metrics.token_file (a file only its owner can read) or listen on 127.0.0.1"};
  }
  return e;
}

struct MetricsServer::State {
  State(asio::io_context& io_in, MetricsEndpoint endpoint_in, Render render_in)
      : io(io_in), acceptor(io_in), endpoint(std::move(endpoint_in)), render(std::move(render_in)) {}
  asio::io_context& io;
  tcp::acceptor acceptor;                            // the listener
  MetricsEndpoint endpoint;                          // address and token
  Render render;                                     // the exposition, on demand
  std::list<std::weak_ptr<beast::tcp_stream>> open;  // connections in flight
  bool stopped = false;
};

namespace {

// One connection: read one request (deadline, limits), answer, close.
class Connection : public std::enable_shared_from_this<Connection> {
 public:
  Connection(tcp::socket socket, std::shared_ptr<MetricsServer::State> state)
      : stream_(std::make_shared<beast::tcp_stream>(std::move(socket))), state_(std::move(state)) {}

  void Run() {
    state_->open.push_back(stream_);
    parser_.header_limit(kHeaderLimit);
    parser_.body_limit(kBodyLimit);
    stream_->expires_after(kRequestDeadline);
    http::async_read(*stream_, buffer_, parser_,
                     [self = shared_from_this()](beast::error_code ec, std::size_t) { self->OnRead(ec); });
  }

 private:
  void OnRead(beast::error_code ec) {
    if (ec) {
      Close();
      return;
    }
    const auto& req = parser_.get();
    auto res = std::make_shared<http::response<http::string_body>>();
    res->version(11);
    res->set(http::field::server, "spotvisor");
    res->keep_alive(false);
    const std::string target(req.target());
    if (!Authorized(req)) {
      res->result(http::status::unauthorized);
      res->set(http::field::www_authenticate, "Bearer");
    } else if (req.method() != http::verb::get && req.method() != http::verb::head) {
      res->result(http::status::method_not_allowed);
    } else if (target.substr(0, target.find('?')) != "/metrics") {
      res->result(http::status::not_found);
      res->body() = "spotvisor serves /metrics only\n";
    } else {
      res->result(http::status::ok);
      res->set(http::field::content_type, "text/plain; version=0.0.4; charset=utf-8");
      if (req.method() == http::verb::get) res->body() = state_->render();
    }
    res->prepare_payload();
    stream_->expires_after(kRequestDeadline);
    http::async_write(*stream_, *res,
                      [self = shared_from_this(), res](beast::error_code, std::size_t) { self->Close(); });
  }

  bool Authorized(const http::request<http::string_body>& req) const {
    if (state_->endpoint.token.empty()) return true;
    const auto header = req[http::field::authorization];
    constexpr std::string_view kScheme = "Bearer ";
    if (header.size() <= kScheme.size() || !beast::iequals(header.substr(0, kScheme.size()), kScheme)) return false;
    return ConstantTimeEquals(std::string_view(header.data() + kScheme.size(), header.size() - kScheme.size()),
                              state_->endpoint.token);
  }

  void Close() {
    beast::error_code ignored;
    stream_->socket().shutdown(tcp::socket::shutdown_both, ignored);
    stream_->close();
    state_->open.remove_if([this](const auto& w) { return w.expired() || w.lock() == stream_; });
  }

  std::shared_ptr<beast::tcp_stream> stream_;    // the connection
  std::shared_ptr<MetricsServer::State> state_;  // the server
  beast::flat_buffer buffer_{kHeaderLimit + kBodyLimit};
  http::request_parser<http::string_body> parser_;
};

void Accept(const std::shared_ptr<MetricsServer::State>& state) {
  state->acceptor.async_accept([state](beast::error_code ec, tcp::socket socket) {
    if (ec == asio::error::operation_aborted || state->stopped) return;
    if (!ec) {
      state->open.remove_if([](const auto& w) { return w.expired(); });
      if (state->open.size() < kMaxConnections) {
        std::make_shared<Connection>(std::move(socket), state)->Run();
      }
    }
    Accept(state);
  });
}

}  // namespace

MetricsServer::MetricsServer(asio::io_context& io, MetricsEndpoint endpoint, Render render)
    : state_(std::make_shared<State>(io, std::move(endpoint), std::move(render))) {}

MetricsServer::~MetricsServer() { Stop(); }

Result<std::string> MetricsServer::Start() {
  beast::error_code ec;
  const tcp::endpoint at(asio::ip::make_address(state_->endpoint.host), state_->endpoint.port);
  auto& acceptor = state_->acceptor;
  acceptor.open(at.protocol(), ec);
  if (!ec) acceptor.set_option(asio::socket_base::reuse_address(true), ec);
  if (!ec) acceptor.bind(at, ec);
  if (!ec) acceptor.listen(asio::socket_base::max_listen_connections, ec);
  if (ec) {
    acceptor.close(ec);
    return Error{"cannot listen on " + state_->endpoint.host + ":" + std::to_string(state_->endpoint.port) + ": " +
                 ec.message()};
  }
  const auto bound = acceptor.local_endpoint(ec);
  Accept(state_);
  const std::string host =
      bound.address().is_v6() ? "[" + bound.address().to_string() + "]" : bound.address().to_string();
  return host + ":" + std::to_string(bound.port());
}

void MetricsServer::Stop() {
  if (!state_ || state_->stopped) return;
  state_->stopped = true;
  beast::error_code ignored;
  state_->acceptor.close(ignored);
  for (auto& weak : state_->open) {
    if (auto stream = weak.lock()) stream->close();
  }
  state_->open.clear();
}

}  // namespace spotvisor::telemetry

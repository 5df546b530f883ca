// Implementation of the preemption test helpers. The test binary links spdlog::spdlog, so
// this translation unit talks to the same (shared-library) logger registry as the library.
#include "integration/preemption_test_util.hpp"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/read.hpp>
#include <boost/asio/read_until.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/streambuf.hpp>
#include <boost/asio/write.hpp>
#include <cstdio>
#include <cstdlib>

namespace spotvisor::testing {

namespace asio = boost::asio;
using tcp = asio::ip::tcp;
using error_code = boost::system::error_code;

bool RunUntil(asio::io_context& io, const std::function<bool()>& done, std::chrono::milliseconds timeout) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (!done()) {
    if (std::chrono::steady_clock::now() >= deadline) return done();
    io.restart();
    io.run_for(std::chrono::milliseconds(2));
  }
  return true;
}

void RunFor(asio::io_context& io, std::chrono::milliseconds duration) {
  const auto deadline = std::chrono::steady_clock::now() + duration;
  while (std::chrono::steady_clock::now() < deadline) {
    io.restart();
    io.run_until(deadline);
  }
}

struct RawServer::Impl : std::enable_shared_from_this<RawServer::Impl> {
  Impl(asio::io_context& io_context, Script s)
      : io(io_context),
        acceptor(io_context, tcp::endpoint(asio::ip::make_address("127.0.0.1"), 0)),
        script(std::move(s)) {}

  struct Conn {
    explicit Conn(asio::io_context& io) : socket(io), timer(io) {}
    tcp::socket socket;
    asio::steady_timer timer;
    asio::streambuf buffer;
    std::string out;
    std::size_t written = 0;
  };

  void Accept() {
    acceptor.async_accept([self = shared_from_this()](const error_code& ec, tcp::socket socket) {
      if (ec) return;
      ++self->connection_count;
      auto conn = std::make_shared<Conn>(self->io);
      conn->socket = std::move(socket);
      self->conns.push_back(conn);
      self->ReadHead(conn);
      self->Accept();
    });
  }

  void ReadHead(const std::shared_ptr<Conn>& conn) {
    asio::async_read_until(
        conn->socket, conn->buffer, "\r\n\r\n", [self = shared_from_this(), conn](const error_code& ec, std::size_t n) {
          if (ec) return;
          std::string head(asio::buffers_begin(conn->buffer.data()),
                           asio::buffers_begin(conn->buffer.data()) + static_cast<std::ptrdiff_t>(n));
          conn->buffer.consume(n);
          self->ReadBody(conn, head);
        });
  }

  static std::size_t ContentLength(const std::string& head) {
    std::string lower = head;
    std::transform(lower.begin(), lower.end(), lower.begin(),
                   [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
    const auto at = lower.find("content-length:");
    if (at == std::string::npos) return 0;
    return std::stoul(lower.substr(at + 15));
  }

  void ReadBody(const std::shared_ptr<Conn>& conn, const std::string& head) {
    const std::size_t length = ContentLength(head);
    const std::size_t have = conn->buffer.size();
    const std::size_t missing = length > have ? length - have : 0;
    asio::async_read(conn->socket, conn->buffer, asio::transfer_exactly(missing),
                     [self = shared_from_this(), conn, head, length](const error_code& ec, std::size_t) {
                       if (ec) return;
                       std::string body(asio::buffers_begin(conn->buffer.data()),
                                        asio::buffers_begin(conn->buffer.data()) + static_cast<std::ptrdiff_t>(length));
                       conn->buffer.consume(length);
                       ++self->request_count;
                       self->heads.push_back(head);
                       self->Act(conn, self->script(head, body));
                     });
  }

  void Act(const std::shared_ptr<Conn>& conn, RawAction action) {
    if (action.silent) return;  // keep it open, say nothing
    conn->out = std::move(action.bytes);
    conn->written = 0;
    if (action.per_byte.count() > 0) return Trickle(conn, action);
    asio::async_write(conn->socket, asio::buffer(conn->out),
                      [self = shared_from_this(), conn, action](const error_code& ec, std::size_t) {
                        if (ec) return;
                        self->Finish(conn, action);
                      });
  }

  void Trickle(const std::shared_ptr<Conn>& conn, RawAction action) {
    if (conn->written >= conn->out.size()) return Finish(conn, action);
    asio::async_write(conn->socket, asio::buffer(&conn->out[conn->written], 1),
                      [self = shared_from_this(), conn, action](const error_code& ec, std::size_t) {
                        if (ec) return;
                        ++conn->written;
                        conn->timer.expires_after(action.per_byte);
                        conn->timer.async_wait([self, conn, action](const error_code& wait_ec) {
                          if (!wait_ec) self->Trickle(conn, action);
                        });
                      });
  }

  void Finish(const std::shared_ptr<Conn>& conn, const RawAction& action) {
    if (action.close_after) {
      error_code ignored;
      conn->socket.shutdown(tcp::socket::shutdown_both, ignored);
      conn->socket.close(ignored);
      return;
    }
    ReadHead(conn);
  }

  void Close() {
    error_code ignored;
    acceptor.close(ignored);
    for (auto& conn : conns) {
      conn->timer.cancel();
      conn->socket.close(ignored);
    }
    conns.clear();
  }

  asio::io_context& io;
  tcp::acceptor acceptor;
  Script script;
  std::vector<std::shared_ptr<Conn>> conns;
  std::vector<std::string> heads;
  int request_count = 0;
  int connection_count = 0;
};

RawServer::RawServer(asio::io_context& io, Script script) : impl_(std::make_shared<Impl>(io, std::move(script))) {
  impl_->Accept();
}

RawServer::~RawServer() { impl_->Close(); }

std::uint16_t RawServer::port() const { return impl_->acceptor.local_endpoint().port(); }

std::string RawServer::url() const { return "http://127.0.0.1:" + std::to_string(port()); }

int RawServer::requests() const { return impl_->request_count; }

int RawServer::requests_to(const std::string& path_prefix) const {
  int n = 0;
  for (const auto& head : impl_->heads) {
    const auto space = head.find(' ');
    if (space != std::string::npos && head.compare(space + 1, path_prefix.size(), path_prefix) == 0) {
      ++n;
    }
  }
  return n;
}

int RawServer::connections() const { return impl_->connection_count; }

const std::vector<std::string>& RawServer::heads() const { return impl_->heads; }

std::string HttpAnswer(int status, const std::string& body, const std::vector<std::string>& headers, bool keep_alive) {
  std::string out = "HTTP/1.1 " + std::to_string(status) + " Whatever\r\n";
  for (const auto& h : headers) out += h + "\r\n";
  out += "Content-Length: " + std::to_string(body.size()) + "\r\n";
  out += keep_alive ? "" : "Connection: close\r\n";
  return out + "\r\n" + body;
}

std::uint16_t ClosedPort() {
  asio::io_context io;
  tcp::acceptor acceptor(io, tcp::endpoint(asio::ip::make_address("127.0.0.1"), 0));
  return acceptor.local_endpoint().port();
}

config::ProviderSection FastProvider(config::ProviderKind kind, const std::string& endpoint) {
  config::ProviderSection p;
  p.kind = kind;
  p.endpoint = endpoint;
  p.poll_interval = std::chrono::milliseconds(20);
  p.request_timeout = std::chrono::milliseconds(300);
  p.default_window = std::chrono::seconds(30);
  return p;
}

preemption::WatcherTuning FastTuning() {
  preemption::WatcherTuning t;
  t.retry_after_503 = std::chrono::milliseconds(50);
  t.backoff_max = std::chrono::milliseconds(100);
  t.long_poll_timeout = std::chrono::seconds(5);
  t.azure_first_call_timeout = std::chrono::milliseconds(300);
  t.azure_min_interval = std::chrono::milliseconds(0);
  return t;
}

}  // namespace spotvisor::testing

// Private to src/mock/: the mock metadata server's shared state and behaviour (routing,
// control paths, flapping, flips) and the small interface it drives each connection by.
// The sockets live in mock_connection.cpp (the module's only Beast file), the behaviour in
// mock_metadata_server.cpp. Everything runs on the one io_context thread.
#pragma once

#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/steady_timer.hpp>
#include <chrono>
#include <cstdint>
#include <list>
#include <map>
#include <memory>
#include <optional>
#include <string>

#include "mock_service.hpp"

namespace spotvisor::mock {

// What the server can ask of one accepted connection. Each is shared, owned by its own
// pending handlers; the server keeps weak references.
class MockConnection {
 public:
  virtual ~MockConnection() = default;
  // Writes `reply`, then reads the next request (or hangs up when !keep_alive).
  virtual void Reply(MockReply reply, bool keep_alive) = 0;
  // Keeps `request` until Wake finds a different answer or `hold_for` passes.
  virtual void Hold(MockRequest request, bool keep_alive, Duration hold_for) = 0;
  // Re-asks the service for a held request; answers if it has something to say now.
  virtual void Wake() = 0;
  // Writes `bytes` as they are (no HTTP framing), then hangs up.
  virtual void WriteRaw(std::string bytes) = 0;
  // Reads nothing more and answers nothing for `quiet`, then hangs up.
  virtual void Ignore(Duration quiet) = 0;
  virtual void Close() = 0;
};

// The server's state, shared by the public object and every connection.
struct ServerCore : std::enable_shared_from_this<ServerCore> {
  ServerCore(boost::asio::io_context& io_context, MockProvider p, MockOptions o)
      : io(io_context),
        provider(p),
        options(std::move(o)),
        service(MakeMockService(p, options)),
        acceptor(io_context),
        preempt_timer(io_context) {}

  void Accept();  // in mock_connection.cpp: accepts connections until !running
  FlapPhase Phase() const;
  std::optional<Duration> FlapLeft() const;  // of the current phase, while flapping
  // A parsed request from `connection`: a control path, a flapping answer, or the service's.
  void Route(const std::shared_ptr<MockConnection>& connection, MockRequest request, bool keep_alive);
  MockReply Control(const MockRequest& request);
  void Flip();  // the state changed: answer held long-polls whose answer changed
  void DoPreempt(const PreemptSpec& spec);
  void DoClear();
  std::string StateJson() const;

  boost::asio::io_context& io;                           // the one thread everything runs on
  MockProvider provider;                                 // which service
  MockOptions options;                                   // from the command line or the test
  std::unique_ptr<MockService> service;                  // the protocol
  boost::asio::ip::tcp::acceptor acceptor;               // the listening socket
  boost::asio::steady_timer preempt_timer;               // --preempt-after
  std::list<std::weak_ptr<MockConnection>> connections;  // open connections, for Stop and Flip
  std::uint64_t request_count = 0;                       // metadata requests served
  std::map<std::string, std::uint64_t> path_counts;      // requests per path
  std::uint16_t bound_port = 0;                          // the port Start bound
  std::chrono::steady_clock::time_point started{};       // by Start, for flapping
  bool running = false;                                  // between Start and Stop
};

}  // namespace spotvisor::mock

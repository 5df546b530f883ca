// The /metrics endpoint: HTTP/1.1 on telemetry.metrics.listen, loopback unless a bearer
// token protects it. A wrong or missing token gets 401 with no detail. Every connection
// has a deadline and size limits; one request per connection. Runs on the supervisor's io
// thread; the render callback is called there too.
#pragma once

#include <functional>
#include <memory>
#include <optional>
#include <string>

#include "spotvisor/config/job_config.hpp"
#include "spotvisor/util/result.hpp"

namespace boost::asio {
class io_context;
}  // namespace boost::asio

namespace spotvisor::telemetry {

// A checked listen address and the token (empty = none).
struct MetricsEndpoint {
  std::string host;  // an IP literal
  unsigned short port = 0;
  bool loopback = true;
  std::string token;  // the secret; never logged
};

// Parses telemetry.metrics and reads the token file. Refuses a non-loopback address
// without a token, a token file readable by group/others, a missing or empty one.
Result<MetricsEndpoint> CheckMetricsConfig(const config::MetricsSection& metrics);

class MetricsServer {
 public:
  using Render = std::function<std::string()>;
  MetricsServer(boost::asio::io_context& io, MetricsEndpoint endpoint, Render render);
  ~MetricsServer();
  MetricsServer(const MetricsServer&) = delete;
  MetricsServer& operator=(const MetricsServer&) = delete;

  // Binds and starts accepting; returns "host:port" as bound (port 0 picks one).
  Result<std::string> Start();
  // Closes the listener and every open connection; nothing runs after this returns.
  void Stop();

  struct State;  // the listener and open connections (defined in the .cpp)

 private:
  std::shared_ptr<State> state_;  // shared with the connections in flight
};

}  // namespace spotvisor::telemetry

// Test helpers for the preemption and mock tests: driving an io_context until a condition
// holds (no fixed sleeps), a scriptable misbehaving HTTP server for bad-endpoint cases, a
// recorder for watcher callbacks, and a capture of spdlog lines. Test thread only.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "spotvisor/preemption/watcher.hpp"
#include "support/log_capture.hpp"

namespace boost::asio {
class io_context;
}  // namespace boost::asio

namespace spotvisor::testing {

// Runs `io` until `done()` or `timeout`; returns done()'s last answer.
bool RunUntil(boost::asio::io_context& io, const std::function<bool()>& done,
              std::chrono::milliseconds timeout = std::chrono::seconds(10));
// Runs `io` for exactly `duration` (to show that something does NOT happen).
void RunFor(boost::asio::io_context& io, std::chrono::milliseconds duration);

// What a RawServer does with one request.
struct RawAction {
  std::string bytes;                      // written back, as is
  std::chrono::milliseconds per_byte{0};  // > 0: trickle one byte per this interval
  bool silent = false;                    // never answer, keep the connection open
  bool close_after = true;                // close once written (else read the next request)
};

// A TCP server on 127.0.0.1:0 that answers each request (head + Content-Length body) with
// whatever `script` returns. Runs on `io`.
class RawServer {
 public:
  using Script = std::function<RawAction(const std::string& head, const std::string& body)>;
  RawServer(boost::asio::io_context& io, Script script);
  ~RawServer();
  std::uint16_t port() const;
  std::string url() const;                                // "http://127.0.0.1:PORT"
  int requests() const;                                   // requests read so far
  int requests_to(const std::string& path_prefix) const;  // by request-line path prefix
  int connections() const;                                // connections accepted so far
  const std::vector<std::string>& heads() const;

 private:
  struct Impl;
  std::shared_ptr<Impl> impl_;
};

// Convenience answers.
std::string HttpAnswer(int status, const std::string& body, const std::vector<std::string>& headers = {},
                       bool keep_alive = false);
// A port with nothing listening on it (bound once, then closed).
std::uint16_t ClosedPort();

// Records watcher callbacks.
struct Recorder {
  std::vector<preemption::Notice> notices;
  int cleared = 0;
  preemption::Watcher::NoticeHandler OnNotice() {
    return [this](const preemption::Notice& n) { notices.push_back(n); };
  }
  preemption::Watcher::ClearedHandler OnCleared() {
    return [this] { ++cleared; };
  }
};

// A ProviderSection with test-sized timings pointing at `endpoint`.
config::ProviderSection FastProvider(config::ProviderKind kind, const std::string& endpoint);
// Tuning with test-sized timings.
preemption::WatcherTuning FastTuning();

}  // namespace spotvisor::testing

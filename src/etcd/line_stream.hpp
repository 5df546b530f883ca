// One long-lived HTTP POST whose answer is a stream of lines in a chunked body (the etcd
// gateway's watch): connect, send and read the answer's head under one deadline, then hand
// each complete line over as it arrives, with no deadline (TCP keepalive finds a dead peer).
// io_context thread; destroying it closes the connection and no handler runs after that.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "spotvisor/etcd/transport.hpp"
#include "spotvisor/util/units.hpp"

namespace spotvisor::etcd {

struct LineStreamRequest {
  std::string target;                                        // "/v3/watch"
  std::vector<std::pair<std::string, std::string>> headers;  // besides Host, Content-Type, Content-Length
  std::string body;                                          // sent once, whole
  Duration open_timeout = std::chrono::seconds(2);           // connect + send + the answer's head
};

class LineStream {
 public:
  struct Handlers {
    std::function<void()> opened;                     // a 200 head arrived
    std::function<void(std::string_view line)> line;  // one line, without its newline
    // The stream is over: refused, timed out, not 200 (`message` holds the body's error) or
    // closed. Runs once; `opened` says whether the head had arrived.
    std::function<void(bool opened, std::string message)> ended;
  };

  // `tls`: the transport's context, required for an https member.
  LineStream(boost::asio::io_context& io, Member member, std::shared_ptr<http::TlsContext> tls,
             LineStreamRequest request, Handlers handlers);
  ~LineStream();
  LineStream(const LineStream&) = delete;
  LineStream& operator=(const LineStream&) = delete;

  void Start();

 private:
  struct Impl;
  std::shared_ptr<Impl> impl_;  // shared with in-flight completion handlers
};

}  // namespace spotvisor::etcd

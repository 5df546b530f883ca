// One client connection to an http:// or https:// Endpoint and Beast's HTTP/1.1 reads and
// writes over it, for HttpClient and etcd's LineStream. For https: TLS 1.2 or later, SNI for
// a host name, the server's certificate verified against the trusted CAs and the endpoint's
// host (name or address). Asio SSL and Beast's HTTP operations live in stream.cpp alone.
// io_context thread; handlers run there, each once (operation_aborted after Close).
#pragma once

#include <boost/beast/http/message.hpp>
#include <boost/beast/http/parser.hpp>
#include <boost/beast/http/string_body.hpp>
#include <boost/system/error_code.hpp>
#include <chrono>
#include <cstddef>
#include <functional>
#include <memory>
#include <string>

#include "spotvisor/http/endpoint.hpp"
#include "spotvisor/http/tls.hpp"

namespace boost::asio {
class io_context;
}  // namespace boost::asio

namespace spotvisor::http {

class Stream {
 public:
  using Request = boost::beast::http::request<boost::beast::http::string_body>;
  using Parser = boost::beast::http::response_parser<boost::beast::http::string_body>;
  using TimePoint = std::chrono::steady_clock::time_point;
  using Handler = std::function<void(const boost::system::error_code&)>;
  // `what`: the step that failed and why, for messages ("TLS handshake: certificate verify
  // failed: Hostname mismatch"); empty on success.
  using OpenHandler = std::function<void(const boost::system::error_code&, const std::string& what)>;

  struct Options {
    std::size_t buffer_limit = 64 * 1024;  // bytes read ahead of the parser at most
    bool keepalive = false;                // TCP keepalive probes: a silent peer is found in about 11 s
  };

  // `tls` is required for an https endpoint (Open fails without it) and unused for http.
  Stream(boost::asio::io_context& io, Endpoint endpoint, std::shared_ptr<TlsContext> tls, Options options);
  ~Stream();  // closes
  Stream(const Stream&) = delete;
  Stream& operator=(const Stream&) = delete;

  // Resolves the host (addresses skip it), connects, and for https shakes hands, all
  // before `deadline`.
  void Open(TimePoint deadline, OpenHandler done);
  // The deadline of the reads and writes that follow (Beast's per-operation expiry).
  void ExpiresAt(TimePoint deadline);
  void ExpiresNever();
  // `message` and `parser` must outlive the operation.
  void Write(Request& message, Handler done);
  void ReadHeader(Parser& parser, Handler done);
  void Read(Parser& parser, Handler done);
  void ReadSome(Parser& parser, Handler done);

  // Cancels what is in flight and closes the socket (no TLS close_notify: nothing is
  // waiting for it).
  void Close();
  bool IsOpen() const;
  // Bytes read from the peer that the parser has not taken yet.
  std::size_t Buffered() const;
  // The reason of a failure in words: OpenSSL's for a TLS error (with the certificate
  // check's reason when that failed), else the error's message.
  std::string Explain(const boost::system::error_code& ec) const;
  // True for an error of the TLS layer (handshake, alert, verification).
  static bool IsTlsError(const boost::system::error_code& ec);

 private:
  struct Impl;
  std::shared_ptr<Impl> impl_;  // shared with in-flight completion handlers
};

}  // namespace spotvisor::http

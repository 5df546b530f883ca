// Stream over Beast: a tcp_stream for http, an ssl_stream over one for https, chosen when
// the stream is made; every HTTP operation is instantiated here for both. Also the OpenSSL
// client context (MakeTlsContext). The Impl is shared with its completion handlers, so a
// closed or destroyed Stream never has a handler touch freed memory.
#include "spotvisor/http/stream.hpp"

#include <netinet/in.h>
#include <netinet/tcp.h>
#include <openssl/err.h>
#include <openssl/ssl.h>
#include <openssl/x509v3.h>
#include <sys/socket.h>
#include <unistd.h>

#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/address.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/ssl.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/core/tcp_stream.hpp>
#include <boost/beast/http/read.hpp>
#include <boost/beast/http/write.hpp>
#include <boost/beast/ssl/ssl_stream.hpp>
#include <cstdlib>
#include <optional>
#include <vector>

namespace spotvisor::http {

namespace asio = boost::asio;
namespace ssl = asio::ssl;
namespace beast = boost::beast;
namespace bhttp = beast::http;
using tcp = asio::ip::tcp;
using error_code = boost::system::error_code;

class TlsContext {
 public:
  TlsContext() : context(ssl::context::tls_client) {}
  ssl::context context;      // the OpenSSL SSL_CTX; read-only once made
  bool client_cert = false;  // presents a client certificate
};

namespace {

// OpenSSL's default paths are where the OpenSSL it was built with keeps them (the portable
// binary's is Debian's /usr/lib/ssl). Other distributions keep the system bundle elsewhere:
// load the first that exists, unless SSL_CERT_FILE says which.
void AddDistributionTrustStore(SSL_CTX* ctx) {
  if (std::getenv("SSL_CERT_FILE") != nullptr) return;
  static constexpr const char* kBundles[] = {
      "/etc/ssl/certs/ca-certificates.crt",                 // Debian, Ubuntu, Arch
      "/etc/pki/tls/certs/ca-bundle.crt",                   // RHEL, Amazon Linux, Fedora
      "/etc/pki/ca-trust/extracted/pem/tls-ca-bundle.pem",  // RHEL 7+
      "/etc/ssl/ca-bundle.pem",                             // SUSE
      "/etc/ssl/cert.pem",                                  // Alpine
  };
  for (const char* bundle : kBundles) {
    if (::access(bundle, R_OK) == 0) {
      SSL_CTX_load_verify_locations(ctx, bundle, nullptr);
      break;
    }
  }
  ERR_clear_error();
}

}  // namespace

Result<std::shared_ptr<TlsContext>> MakeTlsContext(const TlsMaterial& material) {
  auto tls = std::make_shared<TlsContext>();
  auto& c = tls->context;
  error_code ec;
  SSL_CTX_set_min_proto_version(c.native_handle(), TLS1_2_VERSION);
  c.set_verify_mode(ssl::verify_peer, ec);
  if (!ec) {
    if (material.ca_pem.empty()) {
      c.set_default_verify_paths(ec);
      if (!ec) AddDistributionTrustStore(c.native_handle());
    } else {
      c.add_certificate_authority(asio::buffer(material.ca_pem), ec);
    }
  }
  if (ec) return Error{"cannot load the trusted CA certificates: " + ec.message()};
  if (!material.cert_pem.empty()) {
    c.use_certificate_chain(asio::buffer(material.cert_pem), ec);
    if (!ec) c.use_private_key(asio::buffer(material.key_pem), ssl::context::pem, ec);
    if (ec) return Error{"cannot load the client certificate and key: " + ec.message()};
    tls->client_cert = true;
  }
  ERR_clear_error();
  return tls;
}

namespace {

// A silent peer (a VM gone without a FIN) is found in about 5 + 3 * 2 s.
void KeepAlive(tcp::socket& socket) {
  error_code ignored;
  socket.set_option(asio::socket_base::keep_alive(true), ignored);
  const int idle = 5;
  const int interval = 2;
  const int count = 3;
  const int fd = socket.native_handle();
  (void)setsockopt(fd, IPPROTO_TCP, TCP_KEEPIDLE, &idle, sizeof idle);
  (void)setsockopt(fd, IPPROTO_TCP, TCP_KEEPINTVL, &interval, sizeof interval);
  (void)setsockopt(fd, IPPROTO_TCP, TCP_KEEPCNT, &count, sizeof count);
}

// A peer that closed TCP without TLS's close_notify has closed the connection all the same.
error_code Plain(const error_code& ec) { return ec == ssl::error::stream_truncated ? asio::error::eof : ec; }

}  // namespace

struct Stream::Impl : std::enable_shared_from_this<Impl> {
  Impl(asio::io_context& io, Endpoint ep, std::shared_ptr<TlsContext> t, Options o)
      : endpoint(std::move(ep)), tls(std::move(t)), options(o), resolver(io), timer(io), buffer(o.buffer_limit) {
    if (endpoint.tls && tls) {
      secure.emplace(io, tls->context);
    } else {
      plain.emplace(io);
    }
  }

  Endpoint endpoint;                                           // where
  std::shared_ptr<TlsContext> tls;                             // for https; outlives `secure`
  Options options;                                             // buffer size, keepalive
  tcp::resolver resolver;                                      // for host names
  asio::steady_timer timer;                                    // bounds the resolver
  std::optional<beast::tcp_stream> plain;                      // http
  std::optional<beast::ssl_stream<beast::tcp_stream>> secure;  // https
  beast::flat_buffer buffer;                                   // bytes read, not yet parsed
  TimePoint deadline;                                          // of the opening

  beast::tcp_stream& Tcp() { return secure ? beast::get_lowest_layer(*secure) : *plain; }
  const beast::tcp_stream& Tcp() const { return secure ? beast::get_lowest_layer(*secure) : *plain; }

  // Runs `f` with the stream in use (instantiates it for both kinds).
  template <class F>
  void With(F&& f) {
    if (secure) {
      f(*secure);
    } else {
      f(*plain);
    }
  }

  void Open(OpenHandler done) {
    if (endpoint.tls && !secure) {  // a caller's mistake; answered like any failure, later
      asio::post(timer.get_executor(), [done = std::move(done)] {
        done(asio::error::operation_not_supported, "https without a TLS context");
      });
      return;
    }
    error_code ec;
    const auto address = asio::ip::make_address(endpoint.host, ec);
    if (!ec) return Connect({tcp::endpoint(address, endpoint.port)}, std::move(done));
    auto self = shared_from_this();
    timer.expires_at(deadline);
    timer.async_wait([self](const error_code& wait_ec) {
      if (!wait_ec) self->resolver.cancel();
    });
    resolver.async_resolve(endpoint.host, std::to_string(endpoint.port),
                           [self, done = std::move(done)](const error_code& rec, const tcp::resolver::results_type& r) {
                             const bool expired = self->timer.expiry() <= asio::steady_timer::clock_type::now();
                             self->timer.cancel();
                             if (rec == asio::error::operation_aborted && expired) {
                               return done(beast::error::timeout, "resolving timed out");
                             }
                             if (rec) return done(rec, "cannot resolve: " + rec.message());
                             self->Connect({r.begin(), r.end()}, done);
                           });
  }

  void Connect(const std::vector<tcp::endpoint>& endpoints, OpenHandler done) {
    auto self = shared_from_this();
    Tcp().expires_at(deadline);
    Tcp().async_connect(endpoints, [self, done = std::move(done)](const error_code& ec, const tcp::endpoint&) {
      if (ec) return done(ec, "connect: " + ec.message());
      error_code ignored;  // small requests: no Nagle delay
      self->Tcp().socket().set_option(tcp::no_delay(true), ignored);
      if (self->options.keepalive) KeepAlive(self->Tcp().socket());
      if (!self->secure) return done({}, "");
      self->Handshake(done);
    });
  }

  void Handshake(OpenHandler done) {
    SSL* handle = secure->native_handle();
    error_code not_address;
    (void)asio::ip::make_address(endpoint.host, not_address);
    if (not_address) {
      // SNI names the host; an address is never sent as SNI (RFC 6066).
      SSL_set_tlsext_host_name(handle, endpoint.host.c_str());
      SSL_set1_host(handle, endpoint.host.c_str());
    } else {
      X509_VERIFY_PARAM_set1_ip_asc(SSL_get0_param(handle), endpoint.host.c_str());
    }
    auto self = shared_from_this();
    Tcp().expires_at(deadline);
    secure->async_handshake(ssl::stream_base::client, [self, done = std::move(done)](const error_code& ec) {
      if (ec) return done(Plain(ec), "TLS handshake: " + self->Explain(Plain(ec)));
      done({}, "");
    });
  }

  std::string Explain(const error_code& ec) const {
    if (ec.category() != asio::error::get_ssl_category()) return ec.message();
    const char* reason = ERR_reason_error_string(static_cast<unsigned long>(ec.value()));
    std::string why = reason != nullptr ? reason : ec.message();
    if (secure && ERR_GET_REASON(static_cast<unsigned long>(ec.value())) == SSL_R_CERTIFICATE_VERIFY_FAILED) {
      // const_cast: OpenSSL's getter takes a non-const SSL* but only reads.
      const long verify = SSL_get_verify_result(const_cast<Impl*>(this)->secure->native_handle());
      if (verify != X509_V_OK) why += std::string(": ") + X509_verify_cert_error_string(verify);
    }
    // "sslv3 alert bad certificate", "tlsv13 alert certificate required": the peer's word.
    if (secure && !tls->client_cert && why.find("alert") != std::string::npos &&
        why.find("certificate") != std::string::npos) {
      why += " (no client certificate was given; does the server want one?)";
    }
    return why;
  }

  void Close() {
    resolver.cancel();
    timer.cancel();
    error_code ignored;
    Tcp().socket().close(ignored);
  }
};

Stream::Stream(asio::io_context& io, Endpoint endpoint, std::shared_ptr<TlsContext> tls, Options options)
    : impl_(std::make_shared<Impl>(io, std::move(endpoint), std::move(tls), options)) {}

Stream::~Stream() { impl_->Close(); }

void Stream::Open(TimePoint deadline, OpenHandler done) {
  impl_->deadline = deadline;
  impl_->Open(std::move(done));
}

void Stream::ExpiresAt(TimePoint deadline) { impl_->Tcp().expires_at(deadline); }
void Stream::ExpiresNever() { impl_->Tcp().expires_never(); }

void Stream::Write(Request& message, Handler done) {
  impl_->With([&](auto& s) {
    bhttp::async_write(s, message,
                       [self = impl_, done = std::move(done)](const error_code& ec, std::size_t) { done(Plain(ec)); });
  });
}

void Stream::ReadHeader(Parser& parser, Handler done) {
  impl_->With([&](auto& s) {
    bhttp::async_read_header(
        s, impl_->buffer, parser,
        [self = impl_, done = std::move(done)](const error_code& ec, std::size_t) { done(Plain(ec)); });
  });
}

void Stream::Read(Parser& parser, Handler done) {
  impl_->With([&](auto& s) {
    bhttp::async_read(s, impl_->buffer, parser,
                      [self = impl_, done = std::move(done)](const error_code& ec, std::size_t) { done(Plain(ec)); });
  });
}

void Stream::ReadSome(Parser& parser, Handler done) {
  impl_->With([&](auto& s) {
    bhttp::async_read_some(
        s, impl_->buffer, parser,
        [self = impl_, done = std::move(done)](const error_code& ec, std::size_t) { done(Plain(ec)); });
  });
}

void Stream::Close() { impl_->Close(); }
bool Stream::IsOpen() const { return impl_->Tcp().socket().is_open(); }
std::size_t Stream::Buffered() const { return impl_->buffer.size(); }
std::string Stream::Explain(const error_code& ec) const { return impl_->Explain(ec); }
bool Stream::IsTlsError(const error_code& ec) { return ec.category() == asio::error::get_ssl_category(); }

}  // namespace spotvisor::http

// The behaviour half of the mock metadata server: routes each request (control paths, the
// flapping phases, the provider's MockService), flips and clears, and the public object's
// Start/Stop. The sockets are mock_connection.cpp's. Everything runs on the io thread.
#include "spotvisor/mock/mock_metadata_server.hpp"

#include <algorithm>
#include <nlohmann/json.hpp>

#include "mock_server_core.hpp"
#include "spotvisor/log/log.hpp"

namespace spotvisor::mock {

using log::Log;
using log::LogLevel;
using log::Quote;

namespace asio = boost::asio;
using tcp = asio::ip::tcp;
using error_code = boost::system::error_code;

namespace {

constexpr std::string_view kControl = "/__spotvisor/";

}  // namespace

void ServerCore::Route(const std::shared_ptr<MockConnection>& connection, MockRequest request, bool keep_alive) {
  if (request.path.rfind(kControl, 0) == 0) {
    connection->Reply(Control(request), keep_alive);
    return;
  }
  ++request_count;
  ++path_counts[request.path];
  switch (Phase()) {
    case FlapPhase::kHealthy:
      break;
    case FlapPhase::kDropped:
      return connection->Close();
    case FlapPhase::kSilent:
      return connection->Ignore(*options.flap);
    case FlapPhase::kGarbage:
      return connection->Reply(
          TextReply(200, "<html><body>Welcome to the hotel network\x01\x02</body></html>", "text/html"), false);
    case FlapPhase::kUnavailable:
      return connection->Reply(TextReply(503, "Service Unavailable\n"), false);
    case FlapPhase::kNotHttp:
      return connection->WriteRaw("SSH-2.0-OpenSSH_9.2\r\n\x01\x02\x03 not http\r\n\r\n");
  }
  MockReply reply = service->Handle(request);
  Log(LogLevel::kDebug, "event=mock_request provider=" + std::string(ToString(provider)) +
                            " method=" + Quote(request.method) + " path=" + Quote(request.path) +
                            " status=" + std::to_string(reply.hold ? 0 : reply.status));
  if (reply.hold) {
    // A flapping service does not hold a long-poll past its phase: the next one misbehaves.
    const auto left = FlapLeft();
    connection->Hold(std::move(request), keep_alive, left ? std::min(*left, reply.hold_for) : reply.hold_for);
  } else {
    connection->Reply(std::move(reply), keep_alive);
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
  for (auto& weak : connections) {
    if (auto connection = weak.lock()) connection->Wake();
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

MockMetadataServer::MockMetadataServer(asio::io_context& io, MockProvider provider, MockOptions options)
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
    return Error{"cannot listen on " + impl.options.listen_host + ":" + std::to_string(impl.options.listen_port) +
                 ": " + ec.message()};
  }
  impl.bound_port = impl.acceptor.local_endpoint().port();
  impl.started = std::chrono::steady_clock::now();
  impl.running = true;
  impl.Accept();
  if (impl.options.preempt_after) {
    impl.preempt_timer.expires_after(*impl.options.preempt_after);
    impl.preempt_timer.async_wait([weak = std::weak_ptr<ServerCore>(impl_)](const error_code& wait_ec) {
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
  for (auto& weak : impl.connections) {
    if (auto connection = weak.lock()) connection->Close();
  }
  impl.connections.clear();
}

bool MockMetadataServer::preempted() const { return impl_->service->preempted(); }

std::uint16_t MockMetadataServer::port() const { return impl_->bound_port; }

std::uint64_t MockMetadataServer::requests() const { return impl_->request_count; }

std::uint64_t MockMetadataServer::requests_to(std::string_view path) const {
  const auto it = impl_->path_counts.find(std::string(path));
  return it == impl_->path_counts.end() ? 0 : it->second;
}

std::vector<std::string> MockMetadataServer::acknowledged() const { return impl_->service->acknowledged(); }

FlapPhase MockMetadataServer::flap_phase() const { return impl_->Phase(); }

std::string MockMetadataServer::url() const {
  return "http://" + impl_->options.listen_host + ":" + std::to_string(impl_->bound_port);
}

}  // namespace spotvisor::mock

// MockMetadataServer driven from a blocking caller; see mock_server_thread.hpp.
#include "spotvisor/mock/mock_server_thread.hpp"

#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/post.hpp>
#include <future>
#include <optional>
#include <thread>

namespace spotvisor::mock {

namespace asio = boost::asio;

struct MockServerThread::Impl {
  Impl(MockProvider provider, MockOptions options) : server(io, provider, std::move(options)) {}

  // Runs `f` on the server's thread and waits for it.
  template <class F>
  void Call(F f) {
    if (!thread.joinable()) return f();
    std::promise<void> done;
    asio::post(io, [&] {
      f();
      done.set_value();
    });
    done.get_future().wait();
  }

  asio::io_context io;  // the server's loop
  std::optional<asio::executor_work_guard<asio::io_context::executor_type>> guard{io.get_executor()};
  MockMetadataServer server;  // lives on io
  std::thread thread;         // runs io
};

MockServerThread::MockServerThread(MockProvider provider, MockOptions options)
    : impl_(std::make_unique<Impl>(provider, std::move(options))) {}

MockServerThread::~MockServerThread() {
  impl_->Call([this] { impl_->server.Stop(); });
  impl_->guard.reset();
  if (impl_->thread.joinable()) impl_->thread.join();
}

Result<std::string> MockServerThread::Start() {
  auto port = impl_->server.Start();
  if (!port) return port.error();
  impl_->thread = std::thread([this] { impl_->io.run(); });
  return impl_->server.url();
}

void MockServerThread::Preempt(const PreemptSpec& spec) {
  impl_->Call([this, &spec] { impl_->server.Preempt(spec); });
}

void MockServerThread::Clear() {
  impl_->Call([this] { impl_->server.Clear(); });
}

}  // namespace spotvisor::mock

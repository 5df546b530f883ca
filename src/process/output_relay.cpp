// OutputRelay; see output_relay.hpp. One async read per pipe at a time; each chunk is
// written through (blocking write to our fd 1 or 2: where spotvisor's output goes is the
// user's choice, and a stalled terminal stalls the trainer's pipe the same way it would
// stall the trainer) before lines are split out for the handler.
#include "spotvisor/process/output_relay.hpp"

#include <unistd.h>

#include <array>
#include <boost/asio/io_context.hpp>
#include <boost/asio/posix/stream_descriptor.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/steady_timer.hpp>
#include <cerrno>
#include <optional>
#include <string>
#include <utility>

namespace spotvisor::process {
namespace {

namespace asio = boost::asio;

constexpr std::size_t kChunk = 64 * 1024;    // bytes per read
constexpr std::size_t kMaxLine = 64 * 1024;  // longer lines are cut for the handler (not for the relay)

void WriteAll(int fd, const char* data, std::size_t size) {
  while (size > 0) {
    const ssize_t n = ::write(fd, data, size);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return;  // our output is gone: keep reading so the trainer never blocks
    data += n;
    size -= static_cast<std::size_t>(n);
  }
}

}  // namespace

struct OutputRelay::Impl : std::enable_shared_from_this<Impl> {
  struct Stream {
    Stream(asio::io_context& io, int fd, int to) : pipe(io), target(to), eof(fd < 0) {
      if (fd >= 0) pipe.assign(fd);
    }
    asio::posix::stream_descriptor pipe;  // the read end, owned
    int target;                           // our fd 1 or 2 (with write_through)
    std::array<char, kChunk> buffer{};
    std::string partial;  // the line so far
    bool eof = false;
  };

  Impl(asio::io_context& io, int out_fd, int err_fd, LineHandler handler, bool through)
      : out(io, out_fd, STDOUT_FILENO),
        err(io, err_fd, STDERR_FILENO),
        deadline(io),
        on_line(std::move(handler)),
        write_through(through) {}

  void Read(Stream& s) {
    if (s.eof) return;
    s.pipe.async_read_some(asio::buffer(s.buffer),
                           [self = shared_from_this(), &s](const boost::system::error_code& ec, std::size_t n) {
                             if (n > 0) self->Relay(s, n);
                             if (ec) {
                               self->End(s);
                               return;
                             }
                             self->Read(s);
                           });
  }

  void Relay(Stream& s, std::size_t n) {
    if (write_through) WriteAll(s.target, s.buffer.data(), n);
    if (!on_line) return;
    std::string_view chunk(s.buffer.data(), n);
    for (auto nl = chunk.find('\n'); nl != std::string_view::npos; nl = chunk.find('\n')) {
      Line(s, chunk.substr(0, nl));
      on_line(s.partial);
      s.partial.clear();
      chunk.remove_prefix(nl + 1);
    }
    Line(s, chunk);
  }

  static void Line(Stream& s, std::string_view piece) {
    if (s.partial.size() < kMaxLine) s.partial.append(piece.substr(0, kMaxLine - s.partial.size()));
  }

  void End(Stream& s) {
    if (s.eof) return;
    s.eof = true;
    if (on_line && !s.partial.empty()) on_line(s.partial);  // a last line without '\n'
    s.partial.clear();
    boost::system::error_code ignored;
    s.pipe.close(ignored);
    if (out.eof && err.eof) Ended();
  }

  // Both pipes are done: Drain's deadline and its `then` with them.
  void Ended() {
    deadline.cancel();
    if (auto then = std::exchange(on_done, nullptr)) then();
  }

  void Close() {
    for (Stream* s : {&out, &err}) {
      boost::system::error_code ignored;
      s->pipe.close(ignored);
      s->eof = true;
    }
    on_line = nullptr;
  }

  Stream out, err;
  asio::steady_timer deadline;  // Drain's limit
  LineHandler on_line;
  bool write_through;             // the bytes to our fds 1 and 2 too
  std::function<void()> on_done;  // Drain's `then`
};

OutputRelay::OutputRelay(asio::io_context& io, int stdout_fd, int stderr_fd, LineHandler on_line, bool write_through)
    : impl_(std::make_shared<Impl>(io, stdout_fd, stderr_fd, std::move(on_line), write_through)) {
  impl_->Read(impl_->out);
  impl_->Read(impl_->err);
}

OutputRelay::~OutputRelay() {
  impl_->on_done = nullptr;
  impl_->deadline.cancel();
  impl_->Close();
}

void OutputRelay::Drain(std::chrono::milliseconds within, std::function<void()> then) {
  if (done()) {
    if (then) asio::post(impl_->deadline.get_executor(), std::move(then));
    return;
  }
  impl_->on_done = std::move(then);
  impl_->deadline.expires_after(within);
  impl_->deadline.async_wait([impl = impl_](const boost::system::error_code& ec) {
    if (ec) return;
    impl->Close();
    impl->Ended();
  });
}

bool OutputRelay::done() const { return impl_->out.eof && impl_->err.eof; }

}  // namespace spotvisor::process

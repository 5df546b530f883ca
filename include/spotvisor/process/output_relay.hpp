// Relays a trainer's stdout and stderr pipes to spotvisor's own as the bytes arrive (no
// line buffering: a progress bar or a half line shows at once), and hands every complete
// line to a handler — for health.progress_pattern, and (without the relay) for a command's
// output lines (command.hpp: hooks log them). Lives until both pipes reach EOF, which
// comes once the child's whole group is gone, or until Drain's deadline. io thread only.
#pragma once

#include <chrono>
#include <functional>
#include <memory>
#include <string_view>

namespace boost::asio {
class io_context;
}  // namespace boost::asio

namespace spotvisor::process {

class OutputRelay {
 public:
  using LineHandler = std::function<void(std::string_view line)>;  // without the '\n'

  // Takes ownership of the two read ends (`stderr_fd` -1: one merged pipe). `on_line` may
  // be empty. `write_through` false: the bytes go to `on_line` only, not to our fds 1 and 2.
  OutputRelay(boost::asio::io_context& io, int stdout_fd, int stderr_fd, LineHandler on_line,
              bool write_through = true);
  ~OutputRelay();  // closes the pipes; nothing more is relayed
  OutputRelay(const OutputRelay&) = delete;
  OutputRelay& operator=(const OutputRelay&) = delete;

  // Keeps relaying until EOF, but at most `within`: what a leftover that escaped the
  // group still holds open is not waited for past it. `then` (may be empty) runs once both
  // pipes ended, on the io thread, never inside this call; not after the destructor.
  void Drain(std::chrono::milliseconds within, std::function<void()> then = {});
  bool done() const;  // both pipes at EOF (or closed)

 private:
  struct Impl;
  std::shared_ptr<Impl> impl_;  // shared with the read handlers in flight
};

}  // namespace spotvisor::process

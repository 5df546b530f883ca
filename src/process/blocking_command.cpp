// BlockingCommand; see blocking_command.hpp. Every handler of the command runs inside Wait
// on the caller's thread; a stop requested elsewhere is posted to the private io_context
// and so acted on by the next Wait.
#include "spotvisor/process/blocking_command.hpp"

#include <signal.h>

#include <boost/asio/io_context.hpp>
#include <boost/asio/post.hpp>

namespace spotvisor::process {

namespace asio = boost::asio;

BlockingCommand::BlockingCommand(ChildTable& children, const CommandSpec& spec, std::stop_token stop)
    : io_(std::make_unique<asio::io_context>()), runner_(MakeCommandRunner(*io_, children)) {
  id_ = runner_->Start(spec, [this](const CommandOutcome& outcome) { outcome_ = outcome; });
  if (stop.stop_possible()) {
    stop_.emplace(stop, [io = io_.get(), runner = runner_.get(), id = id_] {
      asio::post(*io, [runner, id] { runner->Cancel(id); });
    });
  }
}

BlockingCommand::~BlockingCommand() {
  stop_.reset();  // waits for a stop callback running on another thread
  if (!outcome_) {
    runner_->Cancel(id_);
    Wait(kCommandSettle);
  }
  runner_.reset();  // before io_: it SIGKILLs what is still left and unwatches it
}

std::optional<CommandOutcome> BlockingCommand::Wait(std::chrono::milliseconds within) {
  if (outcome_) return outcome_;
  if (within.count() <= 0) {
    io_->poll();
  } else {
    const auto until = std::chrono::steady_clock::now() + within;
    while (!outcome_ && io_->run_one_until(until) > 0) {
    }
  }
  if (io_->stopped()) io_->restart();  // out of time, or (finished) out of work
  return outcome_;
}

bool BlockingCommand::Signal(int signo) {
  const pid_t pid = runner_->pid(id_);
  return pid > 0 && kill(pid, signo) == 0;
}

CommandOutcome RunCommand(ChildTable& children, const CommandSpec& spec, std::stop_token stop) {
  BlockingCommand command(children, spec, std::move(stop));
  if (auto outcome = command.Wait(spec.timeout + kCommandSettle)) return *outcome;
  CommandOutcome late;  // not by the runner's own bounds; the destructor still kills the group
  late.end = CommandEnd::kTimedOut;
  late.program = spec.argv.empty() ? "" : spec.argv.front();
  late.timeout = spec.timeout;
  return late;
}

}  // namespace spotvisor::process

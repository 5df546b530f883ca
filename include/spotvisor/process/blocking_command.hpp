// A command (command.hpp) started and waited for by one thread that has no running io
// thread: the mirror's worker, `scontrol requeue` at exit, the drill. It runs the one
// CommandRunner on a private io_context, turned only inside Wait, so the waiting thread is
// the one that reaps (through the ChildTable, woken by the command's pidfd: no polling).
// One thread only, but `stop` may be requested from any thread.
#pragma once

#include <chrono>
#include <functional>
#include <memory>
#include <optional>
#include <stop_token>

#include "spotvisor/process/command.hpp"

namespace spotvisor::process {

// The latest a command's outcome comes after its deadline or a cancel (its status, its
// group and its output; see command.cpp).
inline constexpr std::chrono::seconds kCommandSettle{25};

class BlockingCommand {
 public:
  // Starts `spec` through `children` (which outlives this). `stop`: cancels it.
  BlockingCommand(ChildTable& children, const CommandSpec& spec, std::stop_token stop = {});
  ~BlockingCommand();  // still running: cancelled, and awaited for at most kCommandSettle
  BlockingCommand(const BlockingCommand&) = delete;
  BlockingCommand& operator=(const BlockingCommand&) = delete;

  // The outcome once it is over, waiting at most `within` for it (0: only look).
  // nullopt while it still runs.
  std::optional<CommandOutcome> Wait(std::chrono::milliseconds within);

  // kill(2) to its main process; false once it exited (or never started).
  bool Signal(int signo);

 private:
  std::unique_ptr<boost::asio::io_context> io_;                    // turned inside Wait only
  std::unique_ptr<CommandRunner> runner_;                          // on io_
  CommandRunner::Id id_ = 0;                                       // the one command
  std::optional<CommandOutcome> outcome_;                          // once it is over
  std::optional<std::stop_callback<std::function<void()>>> stop_;  // posts the cancel to io_
};

// Runs `spec` to its end on this thread: the outcome within spec.timeout + kCommandSettle.
CommandOutcome RunCommand(ChildTable& children, const CommandSpec& spec, std::stop_token stop = {});

}  // namespace spotvisor::process

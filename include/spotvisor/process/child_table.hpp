// The one child table: every child spotvisor starts (the trainer; hooks, mirror and
// scontrol commands and the drill's supervisors through command.hpp's runner) is started
// and waited for here, and Reap holds the program's only waitpid(-1), so no
// one can take another's exit status; as a child subreaper it also reaps adopted orphans.
// Owned by whoever runs the io_context (the driver). Spawn and Reap: any thread; group
// watches: the io thread.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <vector>

#include "spotvisor/process/spawn.hpp"
#include "spotvisor/util/result.hpp"

namespace boost::asio {
class io_context;
}  // namespace boost::asio

namespace spotvisor::process {

class ChildTable {
 public:
  // `wait_status` as waitpid(2) reports it (WIFEXITED, WTERMSIG...).
  using ExitCallback = std::function<void(int wait_status)>;
  // true: every process of the group is gone; false: some survived SIGKILL until the deadline.
  using GroupCallback = std::function<void(bool gone)>;

  // `io` runs the group watches' poll timers; it outlives the table.
  explicit ChildTable(boost::asio::io_context& io);
  ~ChildTable();  // pending callbacks are dropped; children are not signalled
  ChildTable(const ChildTable&) = delete;
  ChildTable& operator=(const ChildTable&) = delete;

  // Starts `spec` (see spawn.hpp) and watches it: `on_exit` gets its status once, from
  // the thread that reaped it (any thread: post to your own executor, do not block). The
  // table's lock is held from the fork until the watch is in place (until the exec, a few
  // ms), so no Reap can take the status first. Any thread.
  Result<SpawnedChild> Spawn(const SpawnSpec& spec, ExitCallback on_exit);

  // Drops the watch of `pid`: its status, when it comes, is reaped without a call (an
  // owner going away before its child). Any thread.
  void Unwatch(pid_t pid);

  // Reaps every exited child (waitpid(-1, WNOHANG) until none is left) and calls the
  // watched ones' callbacks after the lock is released; unknown pids (orphans adopted as
  // subreaper) are just reaped. Called on SIGCHLD; harmless when nothing exited. Any thread.
  void Reap();

  // io thread: calls `done` (from the io thread, never inside this call) once group `pgid`
  // is empty, zombies reaped; meanwhile SweepGroup every kGroupPoll, and gives up
  // (done(false)) once `within` has passed.
  void WatchGroup(pid_t pgid, std::chrono::milliseconds within, GroupCallback done);

  // One step of awaiting a group's end: reaps, then true once group `pgid` is empty;
  // otherwise SIGKILLs what is left of it (call again after kGroupPoll). Any thread.
  bool SweepGroup(pid_t pgid);
  static constexpr std::chrono::milliseconds kGroupPoll{5};  // between sweeps

  // io thread: ends every group watch without calling it (shutdown).
  void StopGroupWatches();

  // Children started and not yet reaped (or unwatched). Any thread.
  std::size_t watched() const;

 private:
  struct GroupWatch;
  void PollGroup(const std::shared_ptr<GroupWatch>& watch);

  boost::asio::io_context& io_;                      // group watch timers
  mutable std::mutex mutex_;                         // guards watches_; held across waitpid and fork
  std::map<pid_t, ExitCallback> watches_;            // started and not yet reaped
  std::vector<std::shared_ptr<GroupWatch>> groups_;  // io thread only
};

}  // namespace spotvisor::process

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

// A group being awaited (ChildTable::WatchGroup): the wait ends, without its callback, when
// the handle is cancelled or destroyed. Move-only; an empty handle does nothing.
class GroupWatch {
 public:
  struct State;
  GroupWatch() = default;
  explicit GroupWatch(std::shared_ptr<State> state) : state_(std::move(state)) {}
  GroupWatch(GroupWatch&&) noexcept = default;
  GroupWatch& operator=(GroupWatch&& other) noexcept;
  GroupWatch(const GroupWatch&) = delete;
  GroupWatch& operator=(const GroupWatch&) = delete;
  ~GroupWatch() { Cancel(); }
  void Cancel();       // the watch's io thread
  bool ended() const;  // called, cancelled or empty

 private:
  std::shared_ptr<State> state_;
};

class ChildTable {
 public:
  // `wait_status` as waitpid(2) reports it (WIFEXITED, WTERMSIG...).
  using ExitCallback = std::function<void(int wait_status)>;
  // true: every process of the group is gone; false: some survived SIGKILL until the deadline.
  using GroupCallback = std::function<void(bool gone)>;

  ChildTable() = default;
  ~ChildTable() = default;  // pending callbacks are dropped; children are not signalled
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

  // The one "signal the group until it is gone" loop (a trainer's end, every command's):
  // calls `done` on `io` (never inside this call) once no process of group `pgid` is alive,
  // our zombies reaped; meanwhile every kGroupPoll it reaps and SIGKILLs what is left, and
  // gives up (done(false)) once `within` has passed. Call on `io`'s thread; the table
  // outlives the returned handle, and the watch ends without a call when the handle goes.
  [[nodiscard]] GroupWatch WatchGroup(boost::asio::io_context& io, pid_t pgid, std::chrono::milliseconds within,
                                      GroupCallback done);
  static constexpr std::chrono::milliseconds kGroupPoll{5};  // between sweeps

  // One sweep: reaps, then true once no process of `pgid` is alive (a zombie left is ours,
  // reaped next, or its init's, which may take seconds in some containers); otherwise
  // SIGKILLs what is left of it. Any thread.
  bool SweepGroup(pid_t pgid);

  // Children started and not yet reaped (or unwatched). Any thread.
  std::size_t watched() const;

 private:
  static void PollGroup(const std::shared_ptr<GroupWatch::State>& watch);

  mutable std::mutex mutex_;               // guards watches_; held across waitpid and fork
  std::map<pid_t, ExitCallback> watches_;  // started and not yet reaped
};

}  // namespace spotvisor::process

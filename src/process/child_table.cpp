// The child table; see child_table.hpp. Invariant: a pid is in watches_ from the moment
// fork returned it until Reap took its status (or Unwatch), because Spawn and Reap hold
// the same lock across fork and across waitpid. Callbacks run outside the lock, so one
// may start another child.
#include "spotvisor/process/child_table.hpp"

#include <sys/wait.h>

#include <boost/asio/io_context.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/steady_timer.hpp>
#include <cerrno>
#include <csignal>
#include <utility>

#include "spotvisor/process/process_group.hpp"

namespace spotvisor::process {

struct GroupWatch::State {
  State(boost::asio::io_context& io, ChildTable& owner, pid_t group, std::chrono::steady_clock::time_point until,
        ChildTable::GroupCallback cb)
      : table(owner), pgid(group), deadline(until), timer(io), done(std::move(cb)) {}
  ChildTable& table;                               // reaps and sweeps
  pid_t pgid;                                      // the group waited for
  std::chrono::steady_clock::time_point deadline;  // give up then
  boost::asio::steady_timer timer;                 // the next poll
  ChildTable::GroupCallback done;                  // called once, unless cancelled
  bool stopped = false;                            // finished or cancelled
};

GroupWatch& GroupWatch::operator=(GroupWatch&& other) noexcept {
  if (this != &other) {
    Cancel();
    state_ = std::move(other.state_);
  }
  return *this;
}

bool GroupWatch::ended() const { return !state_ || state_->stopped; }

void GroupWatch::Cancel() {
  if (!state_) return;
  state_->stopped = true;
  state_->timer.cancel();
  state_.reset();
}

Result<SpawnedChild> ChildTable::Spawn(const SpawnSpec& spec, ExitCallback on_exit) {
  std::lock_guard lock(mutex_);
  auto child = process::Spawn(spec);  // an exec failure is reaped inside, by its pid
  if (child) watches_[child->pid] = std::move(on_exit);
  return child;
}

void ChildTable::Unwatch(pid_t pid) {
  std::lock_guard lock(mutex_);
  watches_.erase(pid);
}

void ChildTable::Reap() {
  std::vector<std::pair<ExitCallback, int>> exited;
  {
    std::lock_guard lock(mutex_);
    for (;;) {
      int status = 0;
      const pid_t pid = waitpid(-1, &status, WNOHANG);
      if (pid < 0 && errno == EINTR) continue;
      if (pid <= 0) break;  // none exited (0) or no child at all (ECHILD)
      const auto it = watches_.find(pid);
      if (it == watches_.end()) continue;  // an adopted orphan, or unwatched: reaped is all it needs
      exited.emplace_back(std::move(it->second), status);
      watches_.erase(it);
    }
  }
  for (auto& [callback, status] : exited) {
    if (callback) callback(status);
  }
}

GroupWatch ChildTable::WatchGroup(boost::asio::io_context& io, pid_t pgid, std::chrono::milliseconds within,
                                  GroupCallback done) {
  auto watch =
      std::make_shared<GroupWatch::State>(io, *this, pgid, std::chrono::steady_clock::now() + within, std::move(done));
  boost::asio::post(io, [watch] {
    if (!watch->stopped) PollGroup(watch);
  });
  return GroupWatch(watch);
}

bool ChildTable::SweepGroup(pid_t pgid) {
  Reap();  // our zombies of the group count as members until reaped
  if (!GroupExists(pgid) || GroupMembers(pgid).empty()) return true;
  SignalGroup(pgid, SIGKILL);
  return false;
}

void ChildTable::PollGroup(const std::shared_ptr<GroupWatch::State>& watch) {
  const bool gone = watch->table.SweepGroup(watch->pgid);
  if (gone || std::chrono::steady_clock::now() > watch->deadline) {
    watch->stopped = true;
    auto done = std::move(watch->done);  // it may drop the handle (and its owner)
    done(gone);
    return;
  }
  watch->timer.expires_after(kGroupPoll);
  watch->timer.async_wait([watch](const boost::system::error_code& ec) {
    if (!ec && !watch->stopped) PollGroup(watch);
  });
}

std::size_t ChildTable::watched() const {
  std::lock_guard lock(mutex_);
  return watches_.size();
}

}  // namespace spotvisor::process

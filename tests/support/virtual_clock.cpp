// See virtual_clock.hpp. Timers are entries of one ordered map (due time, then the order they
// were set in); firing one posts its callback to its io_context, so it runs as any handler.
#include "support/virtual_clock.hpp"

#include <boost/asio/io_context.hpp>
#include <boost/asio/post.hpp>
#include <optional>
#include <utility>

namespace spotvisor::testing {

struct VirtualClock::State {
  struct Entry {
    boost::asio::io_context* io;
    std::function<void()> fn;
  };
  mutable std::mutex mu;
  std::chrono::nanoseconds elapsed{0};
  std::map<std::pair<SteadyTime, std::uint64_t>, Entry> timers;  // (due, sequence) -> what runs
  std::uint64_t next_sequence = 1;
  std::atomic<int> in_flight{0};  // BackgroundWork tokens alive
  SteadyTime origin = SteadyTime(std::chrono::hours(1000));
  WallTime wall_start;

  SteadyTime NowLocked() const { return origin + elapsed; }
};

namespace {

class VirtualTimer final : public Timer {
 public:
  VirtualTimer(std::shared_ptr<VirtualClock::State> state, boost::asio::io_context& io)
      : state_(std::move(state)), io_(io) {}
  ~VirtualTimer() override { Cancel(); }

  void After(Duration delay, std::function<void()> fn) override {
    std::lock_guard lock(state_->mu);
    Set(state_->NowLocked() + delay, std::move(fn));
  }
  void At(SteadyTime when, std::function<void()> fn) override {
    std::lock_guard lock(state_->mu);
    Set(when, std::move(fn));
  }
  void Cancel() override {
    std::lock_guard lock(state_->mu);
    CancelLocked();
  }
  bool Pending() const override { return armed_ && *armed_; }

 private:
  void Set(SteadyTime when, std::function<void()> fn) {
    CancelLocked();
    when = std::max(when, state_->NowLocked());
    key_ = std::make_pair(when, state_->next_sequence++);
    armed_ = std::make_shared<bool>(true);
    state_->timers.emplace(*key_, VirtualClock::State::Entry{&io_, [armed = armed_, fn = std::move(fn)] {
                                                               if (!*armed) return;  // cancelled once due
                                                               *armed = false;
                                                               fn();
                                                             }});
  }
  void CancelLocked() {
    if (key_) state_->timers.erase(*key_);
    key_.reset();
    if (armed_) *armed_ = false;
  }

  std::shared_ptr<VirtualClock::State> state_;
  boost::asio::io_context& io_;
  std::optional<std::pair<SteadyTime, std::uint64_t>> key_;  // the entry while pending
  std::shared_ptr<bool> armed_;                              // false once run or cancelled (io thread)
};

}  // namespace

VirtualClock::VirtualClock(WallTime wall_start) : state_(std::make_shared<State>()) { state_->wall_start = wall_start; }

SteadyTime VirtualClock::Now() const {
  std::lock_guard lock(state_->mu);
  return state_->NowLocked();
}

WallTime VirtualClock::WallNow() const {
  std::lock_guard lock(state_->mu);
  return state_->wall_start + state_->elapsed;
}

std::unique_ptr<Timer> VirtualClock::MakeTimer(boost::asio::io_context& io) {
  return std::make_unique<VirtualTimer>(state_, io);
}

void VirtualClock::Sleep(Duration d) {
  std::lock_guard lock(state_->mu);
  state_->elapsed += d;
}

Duration VirtualClock::elapsed() const {
  std::lock_guard lock(state_->mu);
  return std::chrono::duration_cast<Duration>(state_->elapsed);
}

std::size_t VirtualClock::pending_timers() const {
  std::lock_guard lock(state_->mu);
  return state_->timers.size();
}

std::shared_ptr<void> VirtualClock::BackgroundWork() {
  ++state_->in_flight;
  return std::shared_ptr<void>(nullptr, [state = state_](void*) { --state->in_flight; });
}

// Ready handlers first; then whatever another thread is about to post; then the next timer
// (up to `until`, when given); then, with no timer left, real work the loop still waits on (a
// signal, a pipe), unless bounded by `until`; else done.
void VirtualClock::Loop(boost::asio::io_context& io, std::optional<SteadyTime> until) {
  for (;;) {
    // Read before the poll: work that ended before this read has posted its answer already,
    // so the poll runs it; tokens are only taken on this thread, by handlers.
    const bool busy = state_->in_flight > 0;
    io.restart();
    if (io.poll() > 0) continue;
    const bool out_of_work = io.stopped();  // poll stops a loop that has no work left
    if (busy) {
      io.restart();
      io.run_one_for(std::chrono::milliseconds(5));
      continue;
    }
    State::Entry next{nullptr, nullptr};
    {
      std::lock_guard lock(state_->mu);
      auto first = state_->timers.begin();
      if (first != state_->timers.end() && (!until || first->first.first <= *until)) {
        state_->elapsed = std::max(state_->elapsed, first->first.first - state_->origin);
        next = std::move(first->second);
        state_->timers.erase(first);
      } else if (until) {
        state_->elapsed = std::max(state_->elapsed, *until - state_->origin);
        return;
      }
    }
    if (next.fn) {
      boost::asio::post(*next.io, std::move(next.fn));
      continue;
    }
    if (out_of_work) return;
    io.restart();
    io.run_one();
  }
}

void VirtualClock::Run(boost::asio::io_context& io) { Loop(io, std::nullopt); }

void VirtualClock::RunFor(boost::asio::io_context& io, Duration d) { Loop(io, Now() + d); }

}  // namespace spotvisor::testing

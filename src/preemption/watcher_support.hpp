// Pieces every watcher shares: the once-per-change condition log for a bad endpoint, the
// notice book that turns many polls into exactly one on_notice per distinct notice (and
// one on_cleared when the last stop notice is gone), and the error backoff. Time is read from
// the Clock the watcher was made with (util/clock.hpp). io thread only.
#pragma once

#include <chrono>
#include <deque>
#include <map>
#include <memory>
#include <random>
#include <set>
#include <string>
#include <string_view>

#include "spotvisor/http/http_client.hpp"
#include "spotvisor/preemption/time_format.hpp"
#include "spotvisor/preemption/watcher.hpp"
#include "spotvisor/util/clock.hpp"

namespace spotvisor::preemption {

// Logs a bad-endpoint condition when it starts or changes, and the recovery once; never
// once per poll. A flapping endpoint logs its first kChangesLogged changes of a 10-minute
// window, then one line saying it flaps, then one summary per window while it goes on:
// the log stays bounded however long the endpoint misbehaves.
class ConditionLog {
 public:
  // `subject` names what is watched ("token", "spot/instance-action"); windows are measured
  // on `clock`, which outlives the log.
  ConditionLog(const Clock& clock, std::string provider, std::string subject)
      : clock_(&clock), provider_(std::move(provider)), subject_(std::move(subject)), window_start_(clock.Now()) {}
  // `key` names the condition ("timeout", "status_503", "garbage"); a new key logs.
  void Bad(std::string_view key, std::string_view message);
  // Like Bad, at info level (expected conditions such as an IMDSv1-only endpoint).
  void Note(std::string_view key, std::string_view message);
  // The endpoint answered as expected; logs the recovery if something was wrong.
  void Good();
  const std::string& current() const { return current_; }

  static constexpr int kChangesLogged = 6;  // per window
  static constexpr std::chrono::minutes kWindow{10};

 private:
  // Closes a window that has run out (with a summary if changes went unlogged); true when
  // the next change may be logged, counting it.
  bool Admit();
  void RollWindow();

  const Clock* clock_;       // the watcher's (a pointer: the log sits in vectors)
  std::string provider_;     // for the log line
  std::string subject_;      // for the log line
  std::string current_;      // the condition now in force; empty = healthy
  SteadyTime window_start_;  // of the window being counted
  int logged_ = 0;           // changes logged in this window
  int unlogged_ = 0;         // changes counted but not logged in this window
};

// De-duplicates notices by id across polls and tracks which stop notices are in force.
class NoticeBook {
 public:
  // True unless `notice.id` was recorded before; remembers a kStop notice as active under
  // `slot` (e.g. "instance-action").
  bool Record(const std::string& slot, const Notice& notice);
  // The provider says `slot` holds no notice. True when that was the last active stop
  // notice (time for on_cleared).
  bool Remove(const std::string& slot);
  bool Active(const std::string& slot) const { return active_.count(slot) != 0; }
  bool AnyActive() const { return !active_.empty(); }

 private:
  static constexpr std::size_t kRemembered = 256;  // ids kept for de-duplication
  std::set<std::string> seen_;                     // ids reported so far (bounded)
  std::deque<std::string> seen_order_;             // eviction order of seen_
  std::map<std::string, std::string> active_;      // slot -> id of the stop notice in force
};

// Exponential backoff from `base` to `max` for consecutive failures.
class Backoff {
 public:
  Backoff(Duration base, Duration max) : base_(base), max_(max) {}
  Duration Next();  // the delay after one more failure: doubling, at most max, minus ≤ 25 % jitter
  void Reset() { failures_ = 0; }
  int failures() const { return failures_; }
  Duration max() const { return max_; }

 private:
  Duration base_;                                 // first delay
  Duration max_;                                  // ceiling
  int failures_ = 0;                              // consecutive failures so far
  std::minstd_rand rng_{std::random_device{}()};  // the jitter
};

// `text` on one line (whitespace runs collapsed), at most 512 characters, printable only.
std::string OneLine(std::string_view text);

// The condition key and a message for an outcome that is not the expected answer.
std::string ConditionKey(const http::HttpOutcome& outcome);
std::string Describe(const http::HttpOutcome& outcome);

// `now` (the clock's wall time) + window: the deadline of a notice that names no time.
TimePoint DeadlineIn(WallTime now, Duration window);

// The ceiling of a watcher's error backoff: a tenth of `provider.default_window` (3 s by
// default), never above `tuning.backoff_max` nor below `interval`. An outage then delays
// the first sight of a notice by at most a tenth of the shortest warning window.
Duration ErrorBackoffCeiling(const config::ProviderSection& cfg, const WatcherTuning& tuning, Duration interval);

// What every watcher implementation shares: the handlers, the stopped flag, the notice
// book, and a guard so that a callback which stops (or even destroys) the watcher is safe.
class WatcherBase : public Watcher {
 public:
  ~WatcherBase() override;
  void Start(NoticeHandler on_notice, ClearedHandler on_cleared) final;
  void Stop() final;
  void Acknowledge(const Notice& notice) override;  // no-op unless overridden

 protected:
  WatcherBase() = default;
  virtual void OnStart() = 0;  // begin polling
  virtual void OnStop() = 0;   // cancel every timer and request
  // Report `notice` under `slot` (de-duplicated). False when the callback stopped or
  // destroyed this watcher: the caller must return at once without touching members.
  [[nodiscard]] bool Emit(const std::string& slot, const Notice& notice);
  // `slot` holds no notice now. Same return rule as Emit.
  [[nodiscard]] bool EmitAbsent(const std::string& slot);
  bool stopped() const { return stopped_; }
  NoticeBook& book() { return book_; }

 private:
  NoticeHandler on_notice_;                                     // from Start
  ClearedHandler on_cleared_;                                   // from Start
  bool stopped_ = true;                                         // not started, or Stop() called
  NoticeBook book_;                                             // de-duplication
  std::shared_ptr<bool> alive_ = std::make_shared<bool>(true);  // false once destroyed
};

}  // namespace spotvisor::preemption

// ConditionLog, NoticeBook and Backoff. Log lines are one event each with key=value
// fields; messages are quoted.
#include "watcher_support.hpp"

#include <algorithm>
#include <cctype>

#include "spotvisor/log/log.hpp"

namespace spotvisor::preemption {

using log::Log;
using log::LogLevel;
using log::Quote;

void ConditionLog::RollWindow() {
  const auto now = clock_->Now();
  if (now - window_start_ < kWindow) return;
  if (unlogged_ > 0) {
    Log(LogLevel::kWarning, "event=endpoint_flapping provider=" + Quote(provider_) + " subject=" + Quote(subject_) +
                                " changes=" + std::to_string(logged_ + unlogged_) + " window_s=" +
                                std::to_string(std::chrono::duration_cast<std::chrono::seconds>(kWindow).count()) +
                                " condition_now=" + Quote(current_.empty() ? "healthy" : current_));
  }
  window_start_ = now;
  logged_ = 0;
  unlogged_ = 0;
}

bool ConditionLog::Admit() {
  if (logged_ < kChangesLogged) {
    ++logged_;
    return true;
  }
  if (unlogged_++ == 0) {
    Log(LogLevel::kWarning,
        "event=endpoint_flapping provider=" + Quote(provider_) + " subject=" + Quote(subject_) +
            " changes=" + std::to_string(logged_ + 1) +
            " detail=\"the endpoint keeps changing; further changes are counted and summarized every " +
            std::to_string(std::chrono::duration_cast<std::chrono::seconds>(kWindow).count()) + " s\"");
  }
  return false;
}

void ConditionLog::Bad(std::string_view key, std::string_view message) {
  RollWindow();
  if (current_ == key) return;
  current_ = std::string(key);
  if (!Admit()) return;
  Log(LogLevel::kWarning, "event=endpoint_condition provider=" + Quote(provider_) + " subject=" + Quote(subject_) +
                              " condition=" + Quote(key) + " message=" + Quote(OneLine(message)));
}

void ConditionLog::Note(std::string_view key, std::string_view message) {
  RollWindow();
  if (current_ == key) return;
  current_ = std::string(key);
  if (!Admit()) return;
  Log(LogLevel::kInfo, "event=endpoint_condition provider=" + Quote(provider_) + " subject=" + Quote(subject_) +
                           " condition=" + Quote(key) + " message=" + Quote(OneLine(message)));
}

void ConditionLog::Good() {
  RollWindow();
  if (current_.empty()) return;
  if (!Admit()) {
    current_.clear();
    return;
  }
  Log(LogLevel::kInfo, "event=endpoint_recovered provider=" + Quote(provider_) + " subject=" + Quote(subject_) +
                           " after=" + Quote(current_));
  current_.clear();
}

bool NoticeBook::Record(const std::string& slot, const Notice& notice) {
  if (seen_.count(notice.id) != 0) return false;
  seen_.insert(notice.id);
  seen_order_.push_back(notice.id);
  if (seen_order_.size() > kRemembered) {
    seen_.erase(seen_order_.front());
    seen_order_.pop_front();
  }
  if (notice.action == NoticeAction::kStop) active_[slot] = notice.id;
  return true;
}

bool NoticeBook::Remove(const std::string& slot) {
  const auto it = active_.find(slot);
  if (it == active_.end()) return false;
  Log(LogLevel::kInfo, "event=notice_gone slot=" + Quote(slot) + " id=" + Quote(it->second));
  active_.erase(it);
  return active_.empty();
}

Duration Backoff::Next() {
  Duration delay = base_;
  for (int i = 0; i < failures_ && delay < max_; ++i) delay *= 2;
  ++failures_;
  delay = std::min(delay, max_);
  // Up to a quarter off, never above: fixed delays can lock onto an endpoint that fails
  // periodically (a 3 s backoff against a 3 s fault cycle samples the same fault forever).
  std::uniform_int_distribution<Duration::rep> off(0, delay.count() / 4);
  return delay - Duration(off(rng_));
}

std::string OneLine(std::string_view text) {
  std::string out;
  bool space = false;
  for (const char c : text) {
    if (out.size() >= 512) break;
    const auto u = static_cast<unsigned char>(c);
    if (std::isspace(u)) {
      space = !out.empty();
      continue;
    }
    if (space) out.push_back(' ');
    space = false;
    out.push_back(c == '"' ? '\'' : (std::isprint(u) ? c : '?'));
  }
  return out;
}

std::string ConditionKey(const http::HttpOutcome& outcome) {
  if (outcome.ok()) return "status_" + std::to_string(outcome.response.status);
  return ToString(outcome.error);
}

std::string Describe(const http::HttpOutcome& outcome) {
  if (!outcome.ok()) return outcome.message;
  return "unexpected HTTP " + std::to_string(outcome.response.status) + ": " +
         OneLine(outcome.response.body.substr(0, 120));
}

TimePoint DeadlineIn(WallTime now, Duration window) {
  return std::chrono::time_point_cast<TimePoint::duration>(now + window);
}

Duration ErrorBackoffCeiling(const config::ProviderSection& cfg, const WatcherTuning& tuning, Duration interval) {
  return std::max(interval, std::min(tuning.backoff_max, cfg.default_window / 10));
}

WatcherBase::~WatcherBase() { *alive_ = false; }

void WatcherBase::Start(NoticeHandler on_notice, ClearedHandler on_cleared) {
  on_notice_ = std::move(on_notice);
  on_cleared_ = std::move(on_cleared);
  stopped_ = false;
  OnStart();
}

void WatcherBase::Stop() {
  if (stopped_) return;
  stopped_ = true;
  OnStop();
}

void WatcherBase::Acknowledge(const Notice&) {}

bool WatcherBase::Emit(const std::string& slot, const Notice& notice) {
  if (stopped_) return false;
  if (!book_.Record(slot, notice)) return true;
  // (The supervisor logs the notice, once, with what it does about it.)
  const auto alive = alive_;
  const NoticeHandler handler = on_notice_;  // a copy: the callback may destroy *this
  if (handler) handler(notice);
  return *alive && !stopped_;
}

bool WatcherBase::EmitAbsent(const std::string& slot) {
  if (stopped_) return false;
  if (!book_.Remove(slot)) return true;
  Log(LogLevel::kInfo, "event=notice_cleared slot=" + Quote(slot));
  const auto alive = alive_;
  const ClearedHandler handler = on_cleared_;  // a copy: the callback may destroy *this
  if (handler) handler();
  return *alive && !stopped_;
}

}  // namespace spotvisor::preemption

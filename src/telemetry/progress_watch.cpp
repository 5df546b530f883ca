// Each attempt's first progress (see progress_watch.hpp): the heartbeat file's mtime, polled
// until it passes the attempt's start, or the first line that matches the progress pattern.
// io thread only.
#include "progress_watch.hpp"

#include <sys/stat.h>

#include <charconv>
#include <filesystem>

namespace spotvisor::telemetry {
namespace {

constexpr auto kHeartbeatPoll = std::chrono::seconds(1);  // until the heartbeat file first moves

std::optional<std::int64_t> MtimeMs(const std::filesystem::path& path) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) return std::nullopt;
  return static_cast<std::int64_t>(st.st_mtim.tv_sec) * 1000 + st.st_mtim.tv_nsec / 1000000;
}

}  // namespace

ProgressWatch::ProgressWatch(const config::HealthSection& health, Clock& clock, boost::asio::io_context& io,
                             FirstProgress first_progress)
    : health_(health), clock_(clock), io_(io), first_progress_(std::move(first_progress)) {
  if (!health_.heartbeat_file && !health_.progress_pattern.empty()) {
    pattern_.emplace(health_.progress_pattern, std::regex::ECMAScript);
  }
}

const char* ProgressWatch::source() const {
  return health_.heartbeat_file              ? "heartbeat"
         : !health_.progress_pattern.empty() ? "progress_pattern"
                                             : "first_checkpoint";
}

void ProgressWatch::AttemptStarted(std::int64_t started_ms) {
  started_ = started_ms;
  last_step_.reset();
  awaiting_ = health_.heartbeat_file || pattern_;
  if (!health_.heartbeat_file) return;
  if (!poll_) poll_ = clock_.MakeTimer(io_);
  PollHeartbeat();
}

void ProgressWatch::AttemptEnded() {
  started_.reset();
  awaiting_ = false;
}

void ProgressWatch::Stop() {
  stopped_ = true;
  poll_.reset();
}

void ProgressWatch::PollHeartbeat() {
  if (!awaiting_ || !started_ || stopped_) return;
  if (auto mtime = MtimeMs(*health_.heartbeat_file); mtime && *mtime >= *started_) {
    Reached(*mtime);
    return;
  }
  poll_->After(kHeartbeatPoll, [this] { PollHeartbeat(); });
}

void ProgressWatch::Line(std::string_view line) {
  if (!pattern_ || !started_) return;
  std::match_results<std::string_view::const_iterator> m;
  if (!std::regex_search(line.begin(), line.end(), m, *pattern_)) return;
  // The pattern's group, when it has one, is the step (health.progress_pattern).
  if (m.size() > 1 && m[1].matched) {
    std::uint64_t step = 0;
    const std::string_view digits(&*m[1].first, static_cast<std::size_t>(m[1].length()));
    if (std::from_chars(digits.data(), digits.data() + digits.size(), step).ec == std::errc{}) last_step_ = step;
  }
  if (awaiting_ && !health_.heartbeat_file) Reached(UnixMillis(clock_.WallNow()));
}

void ProgressWatch::Reached(std::int64_t ms) {
  awaiting_ = false;
  first_progress_(ms);
}

}  // namespace spotvisor::telemetry

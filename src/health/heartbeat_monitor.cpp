// Heartbeat hang detection; see heartbeat_monitor.hpp. A hang must hold on both clocks:
// the wall clock (mtime) and the steady clock (time since start), so that a wall-clock
// jump forward cannot fake one. Both are the run's Clock; a stat holds its BackgroundWork
// until the answer is posted back, so that virtual time waits for the file system.
#include "spotvisor/health/heartbeat_monitor.hpp"

#include <sys/stat.h>

#include <boost/asio/io_context.hpp>
#include <boost/asio/post.hpp>

#include "spotvisor/log/log.hpp"

namespace spotvisor::health {
namespace {

namespace asio = boost::asio;
using log::Log;
using log::LogLevel;
using log::Quote;
using std::chrono::duration_cast;

std::optional<WallTime> Mtime(const std::filesystem::path& file) {
  struct stat st {};
  if (::stat(file.c_str(), &st) != 0) return std::nullopt;
  const auto since_epoch = std::chrono::seconds(st.st_mtim.tv_sec) + std::chrono::nanoseconds(st.st_mtim.tv_nsec);
  return WallTime(duration_cast<WallTime::duration>(since_epoch));
}

}  // namespace

HeartbeatMonitor::HeartbeatMonitor(const config::JobConfig& job) : job_(job) {
  // The loader has compiled the same pattern once already, so this cannot throw.
  if (!job.health.progress_pattern.empty()) progress_.emplace(job.health.progress_pattern, std::regex::ECMAScript);
}

std::string HeartbeatMonitor::Source() const {
  std::string out;
  if (job_.health.heartbeat_file) out = "heartbeat_file=" + Quote(job_.health.heartbeat_file->string());
  if (progress_) out += std::string(out.empty() ? "" : " ") + "progress_pattern=" + Quote(job_.health.progress_pattern);
  return out;
}

void HeartbeatMonitor::OnTrainerLine(std::string_view line) {
  std::match_results<std::string_view::const_iterator> m;
  if (!progress_ || attempt_ == 0 || !std::regex_search(line.begin(), line.end(), m, *progress_)) return;
  last_line_ = clock_->WallNow();
  if (m.size() > 1 && m[1].matched) {
    std::uint64_t step = 0;
    bool digits = m[1].length() > 0 && m[1].length() < 20;
    for (auto it = m[1].first; digits && it != m[1].second; ++it) {
      digits = *it >= '0' && *it <= '9';
      step = step * 10 + static_cast<std::uint64_t>(*it - '0');
    }
    if (digits) last_step_ = step;
  }
}

HeartbeatMonitor::~HeartbeatMonitor() { worker_.join(); }

void HeartbeatMonitor::OnStart(supervisor::RunControl& control) {
  control_ = &control;
  clock_ = &control.clock();
  timer_ = clock_->MakeTimer(control.io());
  Log(LogLevel::kInfo,
      "event=hang_detection " + Source() + " hang_timeout=" + FormatDuration(job_.health.hang_timeout));
}

void HeartbeatMonitor::OnAttemptStarted(const supervisor::SpawnAction& start, pid_t) {
  attempt_ = start.attempt;
  last_line_.reset();
  last_step_.reset();
  started_wall_ = clock_->WallNow();
  started_ = clock_->Now();
  ArmIn(job_.health.hang_timeout);
}

void HeartbeatMonitor::OnPhase(supervisor::Phase phase) {
  if (phase == supervisor::Phase::kRunning) return;
  attempt_ = 0;  // stopping, exited, backing off: no hang clock
  if (timer_) timer_->Cancel();
}

void HeartbeatMonitor::OnExit(int, const std::string&) {
  stopped_ = true;
  attempt_ = 0;
  if (timer_) timer_->Cancel();
}

void HeartbeatMonitor::ArmIn(Duration delay) {
  if (stopped_) return;
  timer_->After(delay, [this] {
    if (!stopped_) Look();
  });
}

void HeartbeatMonitor::Look() {
  if (attempt_ == 0) return;
  if (looking_) {  // the last stat is still stuck: look again later
    ArmIn(job_.health.hang_timeout);
    return;
  }
  if (!job_.health.heartbeat_file) {
    Judge(attempt_, std::nullopt);
    return;
  }
  looking_ = true;
  asio::post(worker_, [this, attempt = attempt_, file = *job_.health.heartbeat_file,
                       in_flight = clock_->BackgroundWork()]() mutable {
    auto mtime = Mtime(file);
    asio::post(control_->io(), [this, attempt, mtime] {
      looking_ = false;
      if (!stopped_) Judge(attempt, mtime);
    });
    in_flight.reset();  // after the post
  });
}

void HeartbeatMonitor::Judge(int attempt, std::optional<WallTime> heartbeat) {
  if (attempt != attempt_) return;                                                     // that trainer is gone
  if (last_line_ && (!heartbeat || *last_line_ > *heartbeat)) heartbeat = last_line_;  // the newer pulse
  const auto timeout = job_.health.hang_timeout;
  const PulseVerdict v = JudgePulse(started_wall_, heartbeat, clock_->WallNow(), timeout);
  const auto running_for = duration_cast<Duration>(clock_->Now() - started_);
  if (!v.hung || running_for < timeout) {
    ArmIn(v.hung ? timeout - running_for : std::max(v.check_in, Duration(1)));
    return;
  }
  std::string pulse = heartbeat && *heartbeat >= started_wall_ ? "last pulse " + FormatDuration(v.silent) + " ago"
                                                               : "no pulse since the trainer started";
  if (last_step_) pulse += ", last step " + std::to_string(*last_step_);
  Log(LogLevel::kWarning, "event=hang_detected attempt=" + std::to_string(attempt) + " " + Source() +
                              " silent=" + FormatDuration(v.silent) + " hang_timeout=" + FormatDuration(timeout) +
                              " detail=" + Quote(pulse));
  attempt_ = 0;  // one stop request per attempt
  const std::string what = job_.health.heartbeat_file ? job_.health.heartbeat_file->string() : "progress_pattern";
  control_->RequestStop(supervisor::StopReason::kHang,
                        "no heartbeat for " + FormatDuration(v.silent) + " (" + what + ": " + pulse + ")");
}

}  // namespace spotvisor::health

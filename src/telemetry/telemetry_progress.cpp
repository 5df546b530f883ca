// What the telemetry observer records for goodput and for every notice (see
// telemetry_observer_impl.hpp): each attempt's first progress (the heartbeat file moving,
// a progress line, else — in the report — its first checkpoint), the group's waiting for
// its members, and the notices settled (saved or not) with their event= lines. io thread.
#include <sys/stat.h>

#include <boost/asio/post.hpp>
#include <charconv>
#include <cstdio>

#include "spotvisor/log/log.hpp"
#include "spotvisor/telemetry/notice_saves.hpp"
#include "telemetry_observer_impl.hpp"

namespace spotvisor::telemetry {

using log::Log;
using log::LogLevel;
namespace {

constexpr auto kHeartbeatPoll = std::chrono::seconds(1);  // until the heartbeat file first moves

std::optional<std::int64_t> MtimeMs(const std::filesystem::path& path) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) return std::nullopt;
  return static_cast<std::int64_t>(st.st_mtim.tv_sec) * 1000 + st.st_mtim.tv_nsec / 1000000;
}

std::string Seconds3(std::int64_t ms) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.3f", static_cast<double>(ms) / 1000.0);
  return buf;
}

}  // namespace

void TelemetryObserver::TrackProgress() {
  awaiting_progress_ = job_.health.heartbeat_file || progress_;
  if (!job_.health.heartbeat_file) return;
  if (!progress_timer_) progress_timer_ = clock_->MakeTimer(control_->io());
  PollHeartbeat();
}

void TelemetryObserver::PollHeartbeat() {
  if (!awaiting_progress_ || !current_ || exited_) return;
  if (auto mtime = MtimeMs(*job_.health.heartbeat_file); mtime && *mtime >= current_->started_ms) {
    FirstProgress(*mtime);
    return;
  }
  progress_timer_->After(kHeartbeatPoll, [this] { PollHeartbeat(); });
}

void TelemetryObserver::OnTrainerLine(std::string_view line) {
  if (!progress_ || !current_) return;
  std::match_results<std::string_view::const_iterator> m;
  if (!std::regex_search(line.begin(), line.end(), m, *progress_)) return;
  // The pattern's group, when it has one, is the step (health.progress_pattern).
  if (m.size() > 1 && m[1].matched) {
    std::uint64_t step = 0;
    const std::string_view digits(&*m[1].first, static_cast<std::size_t>(m[1].length()));
    if (std::from_chars(digits.data(), digits.data() + digits.size(), step).ec == std::errc{}) last_step_ = step;
  }
  if (awaiting_progress_ && !job_.health.heartbeat_file) FirstProgress(NowMs());
}

void TelemetryObserver::FirstProgress(std::int64_t ms) {
  awaiting_progress_ = false;
  if (!current_) return;
  record_->ledger().AddFirstProgress(current_->attempt, ms);
  Log(LogLevel::kInfo, "event=first_progress attempt=" + std::to_string(current_->attempt) + " from=" +
                           record_->ledger().first_progress_from + " after_s=" + Seconds3(ms - current_->started_ms));
  record_->Save();
}

// Never "checkpoint=none" when a good one exists: a resume starts from the newest good
// checkpoint, and the steps the trainer had reached beyond it are the ones lost.
void TelemetryObserver::NameWhatWasLost(NoticeRecord& n) const {
  if (n.validated_ms || !n.checkpoint.empty() || !newest_good_) return;
  n.checkpoint = newest_good_->first;
  n.step = newest_good_->second;
  if (last_step_ && *last_step_ >= newest_good_->second) n.steps_lost = *last_step_ - newest_good_->second;
}

void TelemetryObserver::Settle(const std::vector<std::size_t>& settled) {
  if (settled.empty()) return;
  const auto summary = record_->Summary(current_);
  auto& notices = record_->ledger().notices;
  for (const std::size_t i : settled) {
    auto& n = notices[i];
    NameWhatWasLost(n);
    std::optional<double> steps_lost;
    for (const auto& a : summary.attempts) {
      if (a.record.attempt == n.attempt) steps_lost = a.steps_lost_estimated;
    }
    if (n.steps_lost) steps_lost = static_cast<double>(*n.steps_lost);  // measured beats estimated
    Log(n.outcome == "saved" || n.outcome == "no-deadline" ? LogLevel::kInfo : LogLevel::kWarning,
        NoticeEventLine(n, steps_lost));
  }
  record_->Save();
}

void TelemetryObserver::TrackWaiting(supervisor::Phase phase) {
  if (job_.coordination.nodes <= 1) return;
  // A spare (or a newcomer held until a shrunken group stops) waits for the group too.
  const bool waiting = phase == supervisor::Phase::kJoining || phase == supervisor::Phase::kFinishing ||
                       phase == supervisor::Phase::kSpare;
  if (waiting && !waiting_since_) waiting_since_ = NowMs();
  if (!waiting && waiting_since_) {
    record_->ledger().AddWaiting({*waiting_since_, NowMs()});
    waiting_since_.reset();
    record_->Save();
  }
}

void TelemetryObserver::Subscribe(mirror::MirrorObserver* mirror) {
  if (!mirror) return;
  mirror_feed_ = std::make_shared<MirrorFeed>();
  mirror_feed_->owner = this;
  mirror->SubscribeUploaded(
      [feed = mirror_feed_](const mirror::MirrorItem& item, const std::optional<mirror::DurabilityPlan>& plan) {
        std::lock_guard lock(feed->mutex);
        if (!feed->owner || !feed->io || !feed->clock) return;
        feed->done.push_back({item.name, item.step, UnixMillis(feed->clock->WallNow()), plan});
        boost::asio::post(*feed->io, [feed] {
          TelemetryObserver* owner = nullptr;
          {
            std::lock_guard read(feed->mutex);
            owner = feed->owner;
          }
          if (owner) owner->TakeMirrored();
        });
      });
}

void TelemetryObserver::TakeMirrored() {
  if (exited_ || !record_ || !mirror_feed_) return;
  std::vector<MirrorFeed::Done> done;
  {
    std::lock_guard lock(mirror_feed_->mutex);
    done.swap(mirror_feed_->done);
  }
  if (done.empty()) return;
  for (const auto& d : done) {
    MatchMirrored(record_->ledger(), d.name, d.at_ms);
    if (!newest_durable_ || d.step >= newest_durable_->first) newest_durable_ = std::pair{d.step, d.at_ms};
    durable_.push_back({d.step, d.at_ms});
    if (d.plan) durability_ = d.plan;
  }
  // A notice whose deadline passed is settled now, so only the last uploads need keeping.
  SettleDurable(record_->ledger(), durable_, NowMs());
  constexpr std::size_t kDurableKept = 1024;
  if (durable_.size() > kDurableKept) durable_.erase(durable_.begin(), durable_.end() - kDurableKept);
  record_->Save();
}

void TelemetryObserver::DetachMirror() {
  if (!mirror_feed_) return;
  std::lock_guard lock(mirror_feed_->mutex);
  mirror_feed_->owner = nullptr;
}

}  // namespace spotvisor::telemetry

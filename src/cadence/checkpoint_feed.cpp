// The new-checkpoint feed; see checkpoint_feed.hpp. The worker owns the catalog and the
// `seen_` map; the io thread owns the timer and the flags. A scan result travels back
// with asio::post, so listeners never run on the worker.
#include "spotvisor/cadence/checkpoint_feed.hpp"

#include <boost/asio/post.hpp>
#include <set>

#include "spotvisor/telemetry/log.hpp"

namespace spotvisor::cadence {
namespace {

namespace asio = boost::asio;
using telemetry::Log;
using telemetry::LogLevel;
using telemetry::Quote;

// A view (the driver quarantines at selection) that applies checkpoints.keep as each new
// good checkpoint appears. Its cache is read-only here: the verdicts the driver's selection
// saved spare a re-validation of the checkpoints that existed at start.
checkpoint::CatalogOptions ViewOptions(const config::JobConfig& job) {
  return checkpoint::CatalogOptionsFor(job, /*acts=*/false);
}

}  // namespace

CheckpointFeed::CheckpointFeed(const config::JobConfig& job, FeedTiming timing) : job_(job), timing_(timing) {}

CheckpointFeed::~CheckpointFeed() { pool_.join(); }

void CheckpointFeed::Subscribe(Listener listener) { listeners_.push_back(std::move(listener)); }

void CheckpointFeed::Hurry(bool on) {
  if (hurry_ == on || stopped_ || !timer_) return;
  hurry_ = on;
  Arm();
}

void CheckpointFeed::OnStart(supervisor::RunControl& control) {
  io_ = &control.io();
  timer_.emplace(*io_);
  auto catalog = checkpoint::Catalog::Create(ViewOptions(job_));
  if (!catalog) {
    Log(LogLevel::kError, "event=checkpoint_feed_off error=" + Quote(catalog.error().message));
    return;
  }
  catalog_.emplace(std::move(*catalog));
  Tick();  // the baseline scan
}

void CheckpointFeed::OnExit(int, const std::string&) {
  stopped_ = true;
  if (timer_) timer_->cancel();
}

void CheckpointFeed::Arm() {
  timer_->expires_after(hurry_ ? timing_.fast : timing_.slow);
  timer_->async_wait([this](const boost::system::error_code& ec) {
    if (!ec && !stopped_) Tick();
  });
}

void CheckpointFeed::Tick() {
  if (!scanning_) {
    scanning_ = true;
    asio::post(pool_, [this] {
      auto found = Scan();
      asio::post(*io_, [this, found = std::move(found)] {
        scanning_ = false;
        if (stopped_ || !found) return;
        for (const auto& listener : listeners_) listener(*found);
      });
    });
  }
  Arm();
}

std::optional<NewCheckpoint> CheckpointFeed::Scan() {
  auto entries = catalog_->Scan();
  if (!entries) {
    Log(LogLevel::kWarning, "event=checkpoint_scan_failed error=" + Quote(entries.error().message));
    return std::nullopt;
  }
  std::set<std::string> present;
  std::vector<checkpoint::CatalogEntry> fresh;  // new or changed since last judged, newest first
  for (auto& e : *entries) {
    present.insert(e.name);
    const auto it = seen_.find(e.name);
    if (it != seen_.end() && it->second == e.key) continue;
    seen_[e.name] = e.key;
    if (baseline_done_ && e.scan_error.empty()) fresh.push_back(std::move(e));
  }
  std::erase_if(seen_, [&](const auto& kv) { return present.count(kv.first) == 0; });
  baseline_done_ = true;
  for (auto& e : fresh) {
    std::vector<checkpoint::CatalogEntry> one{e};
    catalog_->Judge(one, /*use_cache=*/false);
    if (!one[0].verdict || !one[0].verdict->good) {
      Log(LogLevel::kDebug, "event=checkpoint_not_good_yet path=" + Quote(e.path.string()) +
                                " reason=" + Quote(one[0].verdict ? one[0].verdict->reason : "not judged"));
      continue;
    }
    NewCheckpoint n;
    n.path = e.path;
    n.name = e.name;
    n.step = e.step;
    n.size_bytes = e.key.size;
    n.written_at = std::chrono::system_clock::time_point(
        std::chrono::duration_cast<std::chrono::system_clock::duration>(std::chrono::nanoseconds(e.key.mtime_ns)));
    n.detected_at = std::chrono::system_clock::now();
    Retain();
    return n;
  }
  return std::nullopt;
}

void CheckpointFeed::Retain() {
  if (catalog_->options().keep <= 0) return;
  // A long run keeps `keep` good checkpoints on disk, not only at the next (re)start.
  if (auto deleted = catalog_->ApplyRetention(); !deleted) {
    Log(LogLevel::kWarning, "event=retention_failed error=" + Quote(deleted.error().message));
  }
}

}  // namespace spotvisor::cadence

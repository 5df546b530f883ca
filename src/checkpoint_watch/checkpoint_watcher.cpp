// The checkpoint watcher; see checkpoint_watcher.hpp. The keeper's thread owns `seen_` and
// does the scanning, judging and retention; the io thread owns the timer and the flags. A
// scan's verdicts travel back with asio::post, so subscribers never run on the keeper; the
// scan holds the clock's BackgroundWork until that post, so that virtual time waits for it.
#include "spotvisor/checkpoint_watch/checkpoint_watcher.hpp"

#include <algorithm>
#include <boost/asio/io_context.hpp>
#include <boost/asio/post.hpp>
#include <set>
#include <utility>

#include "spotvisor/log/log.hpp"

namespace spotvisor::checkpoint_watch {
namespace {

namespace asio = boost::asio;
using log::Log;
using log::LogLevel;
using log::Quote;

}  // namespace

CheckpointWatcher::CheckpointWatcher(std::shared_ptr<DirKeeper> keeper, Clock& clock, WatchTiming timing)
    : keeper_(std::move(keeper)), clock_(clock), timing_(timing) {}

// Work posted before this call has run once Call returns (the keeper is first in, first out).
CheckpointWatcher::~CheckpointWatcher() {
  keeper_->Call([] {});
}

void CheckpointWatcher::Subscribe(Subscriber subscriber) { subscribers_.push_back(std::move(subscriber)); }

void CheckpointWatcher::SubscribeWrites(WriteSubscriber subscriber) {
  write_subscribers_.push_back(std::move(subscriber));
}

void CheckpointWatcher::SubscribeArrivals(ArrivalSubscriber subscriber) {
  arrival_subscribers_.push_back(std::move(subscriber));
}

void CheckpointWatcher::Hurry(bool on) {
  if (hurry_ == on || stopped_ || !timer_) return;
  hurry_ = on;
  Arm();
}

void CheckpointWatcher::Await(bool on) {
  if (awaiting_ == on || stopped_ || !timer_) return;
  awaiting_ = on;
  Arm();
}

void CheckpointWatcher::OnStart(supervisor::RunControl& control) {
  io_ = &control.io();
  group_ = control.job().coordination.enabled();
  control_ = &control;
  timer_ = clock_.MakeTimer(*io_);
  Tick();  // the baseline scan, queued on the keeper before the first selection
  Arm();
}

// A checkpoint the trainer wrote on its way out is news as soon as possible.
void CheckpointWatcher::OnSelection(const checkpoint::Selection&) {
  if (!stopped_ && io_) Tick();
}

// In a group, retention keeps the checkpoint this attempt resumed from (the group's agreed
// start) until the next selection, however many newer ones look good meanwhile: a node the
// group left behind may still save into a shared dir, and its saves look good until the
// new epoch's start is recorded. Alone, a start holds nothing once made.
void CheckpointWatcher::OnAttemptStarted(const supervisor::SpawnAction& start, pid_t) {
  std::set<std::filesystem::path> held;
  if (group_ && start.resume) held.insert(start.resume->path);
  keeper_->HoldStart(std::move(held));
  keeper_->Post([keeper = keeper_] { keeper->RefreshFence(); });  // the start is in state.json
}

void CheckpointWatcher::OnAttemptEnded(const state::AttemptRecord&) {
  if (!stopped_ && io_) Tick();
}

void CheckpointWatcher::OnPhase(supervisor::Phase phase) {
  running_ = phase == supervisor::Phase::kRunning || phase == supervisor::Phase::kDeferred;
  keeper_->SetStopping(phase == supervisor::Phase::kStopping);
  // A deferred stop ends when the trainer's next checkpoint is judged good: every poll
  // period in between is steps the trainer runs on and loses. During a stop the checkpoint
  // the trainer saves for it is the one a new VM resumes from: the mirror starts on it (its
  // files as each closes, then the whole) as soon as it is seen.
  Await(phase == supervisor::Phase::kDeferred || phase == supervisor::Phase::kStopping);
}

void CheckpointWatcher::OnExit(int, const std::string&) {
  stopped_ = true;
  if (timer_) timer_->Cancel();
}

void CheckpointWatcher::Arm() {
  timer_->After(hurry_ || awaiting_ ? timing_.fast : timing_.slow, [this] {
    if (stopped_) return;
    Tick();
    Arm();
  });
}

void CheckpointWatcher::Tick() {
  if (scanning_) {
    again_ = true;
    return;
  }
  scanning_ = true;
  keeper_->Post([this, prune = MayPrune(), in_flight = clock_.BackgroundWork()]() mutable {
    auto news = Scan(prune);
    asio::post(*io_, [this, news = std::move(news)] {
      scanning_ = false;
      if (stopped_) return;
      if (!news.verdicts.empty()) {
        for (const auto& subscriber : subscribers_) subscriber(news.verdicts);
      }
      if (!news.writing.empty()) {
        for (const auto& subscriber : write_subscribers_) subscriber(news.writing);
      }
      if (std::exchange(again_, false)) Tick();
    });
    in_flight.reset();  // after the post
    // After the news: a fixed name's version (a copy may take seconds) never delays it.
    keeper_->KeepFixedVersion();
  });
}

bool CheckpointWatcher::MayPrune() const {
  return !group_ || (running_ && control_ != nullptr && control_->MemberForSure());
}

CheckpointWatcher::ScanNews CheckpointWatcher::Scan(bool prune) {
  auto* catalog = keeper_->catalog();
  if (catalog == nullptr) return {};
  auto entries = catalog->Scan();
  if (!entries) {
    Log(LogLevel::kWarning, "event=checkpoint_scan_failed error=" + Quote(entries.error().message));
    return {};
  }
  const auto now = clock_.Now();
  std::set<std::string> present;
  ScanNews news;
  auto& out = news.verdicts;  // newest first until the end
  bool new_good = false;
  for (auto& e : *entries) {
    present.insert(e.name);
    if (!e.scan_error.empty()) continue;
    auto [it, fresh] = seen_.try_emplace(e.name);
    Seen& s = it->second;
    if (fresh || s.key != e.key) {  // new or changed: judged now (the baseline only records)
      s = Seen{e.key, now, /*judged=*/!baseline_done_, /*told=*/!baseline_done_, std::nullopt};
      if (!baseline_done_) continue;
      if (!arrival_subscribers_.empty()) {  // before its verdict, which may take a while
        const auto written_at = std::chrono::system_clock::time_point(
            std::chrono::duration_cast<std::chrono::system_clock::duration>(std::chrono::nanoseconds(e.key.mtime_ns)));
        asio::post(*io_, [this, path = e.path, written_at] {
          if (stopped_) return;
          for (const auto& subscriber : arrival_subscribers_) subscriber(path, written_at);
        });
      }
    }
    if (!s.judged) {
      s.judged = true;
      s.verdict = JudgeOne(e);
    }
    // A bad verdict may be a save caught half-way by a fast poll: it is news only once the
    // checkpoint held still for half a slow period (one slow poll); a good one is news at once.
    // Until then it is a checkpoint being written.
    if (!s.told && s.verdict && !s.verdict->good && now - s.since < timing_.slow / 2) news.writing.push_back(e.path);
    if (s.told || !s.verdict || (!s.verdict->good && now - s.since < timing_.slow / 2)) continue;
    s.told = true;
    new_good = new_good || s.verdict->good;
    out.push_back(*s.verdict);
  }
  std::erase_if(seen_, [&](const auto& kv) { return present.count(kv.first) == 0; });
  baseline_done_ = true;
  if (new_good && prune) keeper_->ApplyRetention();
  std::reverse(out.begin(), out.end());
  return news;
}

CheckpointVerdict CheckpointWatcher::JudgeOne(checkpoint::CatalogEntry& e) {
  keeper_->Judge(e);
  CheckpointVerdict v;
  v.path = e.path;
  v.name = e.name;
  v.step = e.step;
  v.good = e.verdict && e.verdict->good;
  v.reason = e.verdict ? e.verdict->reason : "not judged";
  if (auto shape = MeasureCheckpoint(e.path)) {
    v.shape = *shape;
  } else {
    v.shape.bytes = e.key.size;
    v.shape.mtime_ms = e.key.mtime_ns / 1'000'000;
  }
  v.written_at = std::chrono::system_clock::time_point(
      std::chrono::duration_cast<std::chrono::system_clock::duration>(std::chrono::nanoseconds(e.key.mtime_ns)));
  v.detected_at = clock_.WallNow();
  if (!v.good) {
    Log(LogLevel::kDebug,
        "event=checkpoint_not_good_yet path=" + Quote(e.path.string()) + " reason=" + Quote(v.reason));
  }
  return v;
}

}  // namespace spotvisor::checkpoint_watch

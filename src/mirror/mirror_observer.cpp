// The mirror observer; see mirror_observer.hpp. Threads: the io thread enqueues and hears
// of notices and phases; upload threads take the newest queued item (or send a stop's
// checkpoint early, file by file); the keeper's thread restores (the
// driver's selection thread waits for it, holding the clock's BackgroundWork for the whole
// selection, restore included). Everything shared is under mutex_.
#include "spotvisor/mirror/mirror_observer.hpp"

#include <algorithm>
#include <boost/asio/post.hpp>
#include <map>
#include <thread>

#include "spotvisor/cadence/checkpoint_journal.hpp"
#include "spotvisor/log/log.hpp"
#include "spotvisor/preemption/warning_window.hpp"
#include "spotvisor/process/process_group.hpp"

namespace spotvisor::mirror {
namespace {

namespace asio = boost::asio;
using log::Log;
using log::LogLevel;
using log::Quote;

std::string Ms(SteadyTime::duration d) {
  return std::to_string(std::chrono::duration_cast<std::chrono::milliseconds>(d).count());
}

// A file of a checkpoint being written, as it was when looked at.
struct EarlyFile {
  std::filesystem::path relative;
  std::uintmax_t size = 0;
  std::filesystem::file_time_type mtime;
};
using SentFiles = std::map<std::string, std::pair<std::uintmax_t, std::filesystem::file_time_type>>;

// The files of `dir` that may go up before its verdict: closed (none of `open`), not a temp
// name (renamed or removed before the checkpoint is whole), and new or changed since `sent`.
std::vector<EarlyFile> DueEarly(const std::filesystem::path& dir, const std::set<std::filesystem::path>& open,
                                const SentFiles& sent) {
  namespace fs = std::filesystem;
  std::vector<EarlyFile> due;
  std::error_code ec;
  const fs::path root = fs::weakly_canonical(dir, ec);
  for (fs::recursive_directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
    std::error_code file_ec, time_ec;
    if (!it->is_regular_file(file_ec)) continue;
    EarlyFile f{it->path().lexically_relative(dir), it->file_size(file_ec), it->last_write_time(time_ec)};
    const std::string name = f.relative.filename().string();
    if (file_ec || time_ec || name.starts_with(".") || name.ends_with(".tmp") || open.count(root / f.relative) != 0)
      continue;
    const auto was = sent.find(f.relative.generic_string());
    if (was == sent.end() || was->second != std::pair{f.size, f.mtime}) due.push_back(std::move(f));
  }
  return due;
}

}  // namespace

MirrorObserver::MirrorObserver(const config::JobConfig& job, checkpoint_watch::CheckpointWatcher& watcher)
    : job_(job),
      keeper_(watcher.keeper()),
      pool_(static_cast<std::size_t>(std::max(1, job.checkpoints.mirror.concurrency))) {
  // The newest good checkpoint of each scan (an older one queued with it would be superseded).
  watcher.Subscribe([this](const std::vector<checkpoint_watch::CheckpointVerdict>& verdicts) {
    const auto newest = std::find_if(verdicts.rbegin(), verdicts.rend(), [](const auto& v) { return v.good; });
    if (newest != verdicts.rend()) Enqueue(MirrorItem{newest->path, newest->name, newest->step});
  });
  // A checkpoint caught half-way: one that appears whole (renamed into place) is good at
  // once and never a write.
  watcher.SubscribeWrites([this](const std::vector<std::filesystem::path>& writing) {
    for (const auto& path : writing) Writing(path);
  });
  if (auto pattern = config::NamePattern::Parse(job.checkpoints.pattern)) pattern_ = std::move(*pattern);
}

MirrorObserver::~MirrorObserver() {
  Drain();
  pool_.join();
}

void MirrorObserver::Drain() {
  if (drained_) return;
  drained_ = true;
  const Duration bound = ExitBound();
  const auto started = clock_ ? clock_->Now() : SteadyTime{};
  if (!WaitIdle(bound)) {
    std::string left;
    {
      std::lock_guard lock(mutex_);
      for (const auto& r : running_) left += (left.empty() ? "" : ",") + r.item.name;
    }
    const bool hurried = control_ && control_->ExitHurried();
    const auto waited = clock_ ? std::chrono::duration_cast<Duration>(clock_->Now() - started) : Duration::zero();
    Log(LogLevel::kError, "event=mirror_abandoned uploading=" + Quote(left) +
                              " after_ms=" + Ms(hurried ? waited : bound) + " detail=" +
                              Quote(hurried     ? "a stop signal arrived after the exit line"
                                    : deadline_ ? "the stop notice's deadline passed before the uploads finished"
                                                : "uploads did not finish within checkpoints.mirror.timeout"));
  }
  stop_.request_stop();  // cancels every upload (their own stop sources follow it)
  changed_.notify_all();
  std::lock_guard tell(telling_);  // waits for a subscriber being told: after this, none is
  told_last_ = true;
}

// After the exit line: the VM is gone at the notice's deadline, so waiting longer only
// holds a restart back (the next start uploads what is still not on the mirror).
Duration MirrorObserver::ExitBound() const {
  const Duration timeout = job_.checkpoints.mirror.timeout;
  if (!deadline_ || !clock_) return timeout;
  const auto left = std::chrono::duration_cast<Duration>(*deadline_ - clock_->WallNow());
  return std::clamp(left, Duration::zero(), timeout);
}

void MirrorObserver::OnStart(supervisor::RunControl& control) {
  // All before any checkpoint is enqueued (they are posted).
  clock_ = &control.clock();
  control_ = &control;
  limiter_.emplace(*clock_, job_.checkpoints.mirror.path ? job_.checkpoints.mirror.bandwidth : 0);
  store_ = MakeMirrorStore(job_, control.children());
  if (store_) ledger_.emplace(job_.telemetry.state_dir);
  // Local retention keeps what has not reached the mirror yet.
  if (store_) keeper_->HoldUntilDurable();
}

void MirrorObserver::BeforeSelection() {
  {
    std::lock_guard lock(mutex_);
    if (restore_done_ || !store_) return;
    restore_done_ = true;
  }
  if (!job_.checkpoints.mirror.restore) return;
  // On the keeper: a restore writes into (and may delete from) checkpoints.dir.
  keeper_->Call([this] { Restore(); });
}

void MirrorObserver::Restore() {
  const auto started = clock_->Now();
  // Validated for the selection that follows, which then does not read it again.
  const auto local = keeper_->NewestGood(/*for_selection=*/true);
  const std::optional<std::uint64_t> local_step = local ? std::optional<std::uint64_t>(local->step) : std::nullopt;
  auto result = store_->Restore(local_step, Control(stop_));
  if (!result) {
    Log(LogLevel::kError,
        "event=mirror_restore_failed mirror=" + Quote(store_->Describe()) + " error=" + Quote(result.error().message));
    return;
  }
  if (!result->restored) {
    Log(LogLevel::kInfo, "event=mirror_restore_skipped mirror=" + Quote(store_->Describe()) + " local_step=" +
                             (local_step ? std::to_string(*local_step) : "none") + " detail=" + Quote(result->detail));
    return;
  }
  keeper_->NoteRestored(result->restored->path);
  const auto& r = *result->restored;
  const auto now = UnixMillis(clock_->WallNow());
  ledger_->Set(r.name, DurabilityRecord{r.step, Durability::kDurable, TreeBytes(r.path).value_or(0), now, now,
                                        "restored from the mirror"});
  Log(LogLevel::kWarning,
      "event=mirror_restored mirror=" + Quote(store_->Describe()) + " path=" + Quote(result->restored->path.string()) +
          " step=" + std::to_string(result->restored->step) +
          " local_step=" + (local_step ? std::to_string(*local_step) : "none") + " ms=" + Ms(clock_->Now() - started));
}

void MirrorObserver::OnSelection(const checkpoint::Selection& selection) {
  if (selection.chosen) {
    Enqueue(MirrorItem{selection.chosen->path, selection.chosen->path.filename().string(), selection.chosen->step});
  }
}

void MirrorObserver::OnNotice(const preemption::Notice& notice) {
  if (notice.action != preemption::NoticeAction::kStop) return;
  std::lock_guard lock(mutex_);
  deadline_ = notice.deadline;
  if (!deadline_ && clock_) deadline_ = clock_->WallNow() + job_.provider.default_window;
}

void MirrorObserver::OnPhase(supervisor::Phase phase) {
  std::lock_guard lock(mutex_);
  stopping_ = phase == supervisor::Phase::kStopping;
}

void MirrorObserver::OnAttemptStarted(const supervisor::SpawnAction&, pid_t pid) {
  std::lock_guard lock(mutex_);
  trainer_ = pid;
}

void MirrorObserver::OnAttemptEnded(const state::AttemptRecord&) {
  std::lock_guard lock(mutex_);
  trainer_ = 0;  // its files are all closed
}

// A directory checkpoint being written while a stop is on is the one a new VM will resume
// from: its closed files go up now, ahead of older uploads (as Enqueue's do).
void MirrorObserver::Writing(const std::filesystem::path& path) {
  // A fixed name's versions go up under names of their own: not this one's.
  if (!store_ || !store_->UploadsEarly() || !pattern_ || pattern_->fixed()) return;
  const std::string name = path.filename().string();
  const auto step = pattern_->Match(name);
  std::error_code ec;
  if (!step || !std::filesystem::is_directory(path, ec)) return;
  MirrorItem item{path, name, *step};
  auto own = std::make_shared<std::stop_source>();
  {
    std::lock_guard lock(mutex_);
    if (!(stopping_ || deadline_) || active_.count(name) != 0) return;
    if (early_ && early_->step >= item.step) return;  // it goes on, or a newer one does
    // An older checkpoint rewritten is not the stop's.
    if (std::any_of(running_.begin(), running_.end(), [&](const Running& r) { return r.item.step > item.step; }))
      return;
    if (early_stop_) early_stop_->request_stop();  // an older one gives way
    YieldOlderLocked(item);
    early_ = item;
    early_stop_ = own;
  }
  asio::post(pool_, [this, item = std::move(item), own] { Early(item, own); });
}

void MirrorObserver::Early(const MirrorItem& item, const std::shared_ptr<std::stop_source>& own) {
  constexpr auto kLookAgain = std::chrono::milliseconds(100);
  std::stop_callback follow(stop_.get_token(), [&own] { own->request_stop(); });
  const auto started = clock_->Now();
  SentFiles sent;
  std::uint64_t bytes = 0;
  std::string failed;
  pid_t trainer = 0;
  // Whether it goes on, checked before each file: not once the checkpoint validated (its
  // upload sends the rest), a newer one came, the stop ended or the deadline passed.
  const auto still = [&] {
    std::lock_guard lock(mutex_);
    const bool past = deadline_ && clock_->WallNow() > *deadline_;  // the VM is gone by now
    trainer = trainer_;
    // early_stop_ is this task's while it is the current one (a newer one replaces it).
    return !own->stop_requested() && early_stop_ == own && active_.count(item.name) == 0 && (stopping_ || deadline_) &&
           !past;
  };
  while (still()) {
    std::error_code ec;
    if (!std::filesystem::is_directory(item.path, ec)) break;
    const auto open = trainer > 0 ? process::OpenForWriting(trainer, item.path) : std::set<std::filesystem::path>{};
    const auto due = DueEarly(item.path, open, sent);
    for (const auto& f : due) {
      if (!still()) break;
      if (Status s = store_->UploadEarly(item, f.relative, Control(*own)); !s) {
        if (!own->stop_requested()) failed = s.error().message;
        break;
      }
      sent[f.relative.generic_string()] = {f.size, f.mtime};
      bytes += f.size;
    }
    // With the trainer gone nothing more is written: what is left is the verdict's.
    if (!failed.empty() || (trainer == 0 && due.empty())) break;
    std::this_thread::sleep_for(kLookAgain);
  }
  {
    std::lock_guard lock(mutex_);
    if (early_stop_ == own) {
      early_.reset();
      early_stop_.reset();
    }
  }
  if (!failed.empty()) {
    Log(LogLevel::kWarning, "event=mirror_early_failed name=" + Quote(item.name) +
                                " step=" + std::to_string(item.step) + " files=" + std::to_string(sent.size()) +
                                " error=" + Quote(failed) +
                                " detail=\"the upload after its verdict sends every file\"");
  } else if (!sent.empty()) {
    Log(LogLevel::kInfo, "event=mirror_early name=" + Quote(item.name) + " step=" + std::to_string(item.step) +
                             " files=" + std::to_string(sent.size()) + " bytes=" + std::to_string(bytes) +
                             " ms=" + Ms(clock_->Now() - started) +
                             " detail=\"files uploaded as the trainer closed each, before the checkpoint's verdict; "
                             "the upload after it sends the rest and marks it complete\"");
  }
}

void MirrorObserver::OnExit(int, const std::string&) {
  {
    std::lock_guard lock(mutex_);
    ++busy_;
    HoldClockLocked();
  }
  changed_.notify_all();
  // The trainer's last checkpoint (written while stopping) may not have been seen yet.
  asio::post(pool_, [this] {
    if (!stop_.stop_requested()) {
      // The keeper's verdicts from this run are reused: this is an upload, not a resume.
      auto newest = keeper_->Call([this] { return keeper_->NewestGood(/*for_selection=*/false); });
      if (newest) Enqueue(MirrorItem{newest->path, newest->path.filename().string(), newest->step});
    }
    std::lock_guard lock(mutex_);
    --busy_;
    HoldClockLocked();
    changed_.notify_all();
  });
  Drain();
}

// False when `timeout` passed or a stop signal hurried the exit (a signal cannot wake a
// waiter: the wait looks for it every kHurryCheck).
bool MirrorObserver::WaitIdle(Duration timeout) {
  constexpr Duration kHurryCheck = std::chrono::milliseconds(50);
  std::unique_lock lock(mutex_);
  const auto hurried = [this] { return control_ && control_->ExitHurried(); };
  for (Duration left = timeout; left > Duration::zero(); left -= kHurryCheck) {
    if (changed_.wait_for(lock, std::min(left, kHurryCheck), [&] { return busy_ == 0 || hurried(); })) break;
  }
  return busy_ == 0 && !hurried();
}

void MirrorObserver::Enqueue(MirrorItem item) {
  if (!store_) return;
  {
    std::lock_guard lock(mutex_);
    if (active_.count(item.name) != 0) return;
    active_.insert(item.name);
    keeper_->MarkUploading(item.name, true);
    if (stopping_ || deadline_) YieldOlderLocked(item);
    queue_.push_back(std::move(item));
    ++busy_;
    HoldClockLocked();
  }
  asio::post(pool_, [this] { Work(); });
}

// The checkpoint saved for a notice is the one a new VM resumes from: when every slot is
// taken, the oldest upload of an older checkpoint is cancelled so that it starts now.
void MirrorObserver::YieldOlderLocked(const MirrorItem& newer) {
  const auto slots = static_cast<std::size_t>(std::max(1, job_.checkpoints.mirror.concurrency));
  std::size_t taken = 0;
  Running* oldest = nullptr;
  for (auto& r : running_) {
    if (r.stop->stop_requested()) continue;  // giving way already
    ++taken;
    if (r.item.step < newer.step && (!oldest || r.item.step < oldest->item.step)) oldest = &r;
  }
  if (taken < slots || !oldest) return;
  oldest->stop->request_stop();
  Log(LogLevel::kWarning, "event=mirror_yielded name=" + Quote(oldest->item.name) +
                              " step=" + std::to_string(oldest->item.step) + " to=" + Quote(newer.name) +
                              " to_step=" + std::to_string(newer.step));
}

void MirrorObserver::Work() {
  std::optional<MirrorItem> item;
  std::vector<MirrorItem> superseded;
  auto own = std::make_shared<std::stop_source>();
  {
    std::lock_guard lock(mutex_);
    if (!queue_.empty()) {
      // Newest step first; older ones still waiting are superseded by it.
      auto newest = std::max_element(queue_.begin(), queue_.end(),
                                     [](const MirrorItem& a, const MirrorItem& b) { return a.step < b.step; });
      item = *newest;
      queue_.erase(newest);
      for (auto& old : queue_) superseded.push_back(std::move(old));
      queue_.clear();
      running_.push_back(Running{*item, own});
    }
  }
  for (const auto& old : superseded) {
    Log(LogLevel::kInfo, "event=mirror_superseded name=" + Quote(old.name) + " by=" + Quote(item->name));
  }
  if (item && !stop_.stop_requested()) {
    // Cancelled with the observer, or alone when it gives way.
    std::stop_callback follow(stop_.get_token(), [&own] { own->request_stop(); });
    Upload(*item, *own);
  }
  std::lock_guard lock(mutex_);
  std::erase_if(running_, [&](const Running& r) { return r.stop == own; });
  if (item) active_.erase(item->name);
  for (const auto& old : superseded) active_.erase(old.name);
  if (item) keeper_->MarkUploading(item->name, false);
  for (const auto& old : superseded) keeper_->MarkUploading(old.name, false);
  // This task only: each superseded item has its own task posted, which finds the queue
  // empty and counts itself off then.
  --busy_;
  HoldClockLocked();
  changed_.notify_all();
}

void MirrorObserver::Upload(const MirrorItem& item, const std::stop_source& own) {
  const auto bytes = TreeBytes(item.path);
  const auto started = clock_->Now();
  // Known to be on the mirror (restored from it, uploaded by an earlier run): the store only checks.
  const auto known = ledger_->Get(item.name);
  const bool was_durable = known && known->step == item.step && known->state == Durability::kDurable;
  DurabilityRecord record{item.step, Durability::kUploading, bytes.value_or(0), UnixMillis(clock_->WallNow()), {}, ""};
  if (!was_durable) ledger_->Set(item.name, record);
  auto result = store_->Upload(item, Control(own));
  if (!result && own.stop_requested()) {  // gave way, or the observer ends: logged there
    record.state = stop_.stop_requested() ? Durability::kFailed : Durability::kSuperseded;
    record.detail = stop_.stop_requested() ? "cancelled at exit: the stop notice's deadline or mirror.timeout passed"
                                           : "gave way to a newer checkpoint during a stop";
    ledger_->Set(item.name, record);
    return;
  }
  if (!result) {
    Log(LogLevel::kError, "event=mirror_failed name=" + Quote(item.name) + " mirror=" + Quote(store_->Describe()) +
                              " error=" + Quote(result.error().message));
    record.state = Durability::kFailed;
    record.detail = result.error().message;
    ledger_->Set(item.name, record);
    return;
  }
  if (!was_durable || *result == UploadResult::kUploaded) {
    record.state = Durability::kDurable;
    record.durable_ms = UnixMillis(clock_->WallNow());
    ledger_->Set(item.name, record);
  }
  if (*result == UploadResult::kUploaded) {
    Log(LogLevel::kInfo, "event=mirrored name=" + Quote(item.name) + " step=" + std::to_string(item.step) +
                             " mirror=" + Quote(store_->Describe()) + " ms=" + Ms(clock_->Now() - started));
    if (bytes) Replan(*bytes, std::chrono::duration_cast<Duration>(clock_->Now() - started));
  }
  keeper_->MarkDurable(item.step);
  TellUploaded(item);
  PruneMirror(own);
}

void MirrorObserver::TellUploaded(const MirrorItem& item) {
  std::lock_guard tell(telling_);
  if (told_last_) return;
  const auto plan = Plan();
  for (const auto& done : uploaded_) done(item, plan);
}

// The mirror's retention after an upload: checkpoints.mirror.keep (or checkpoints.keep).
void MirrorObserver::PruneMirror(const std::stop_source& own) {
  const int keep = Keep();
  if (keep > 0 && !job_.checkpoints.mirror.command.empty() && job_.checkpoints.mirror.prune_command.empty()) {
    std::lock_guard lock(mutex_);
    if (!warned_prune_) {
      warned_prune_ = true;
      Log(LogLevel::kWarning,
          "event=mirror_retention_off detail=\"set checkpoints.mirror.prune_command to apply "
          "retention on a command mirror\"");
    }
    return;
  }
  {
    // The mirror's retention waits while a stop is on: the notice's checkpoint goes first,
    // and a slow prune must not hold its slot or the exit (the next run prunes).
    std::lock_guard lock(mutex_);
    if (stopping_ || deadline_) return;
  }
  auto pruned = store_->Prune(keep, Control(own));
  if (!pruned) {
    Log(LogLevel::kError, "event=mirror_prune_failed error=" + Quote(pruned.error().message));
    return;
  }
  for (const auto& name : *pruned)
    Log(LogLevel::kInfo, "event=mirror_pruned name=" + Quote(name) + " keep=" + std::to_string(keep));
}

// The save time is the newest measured one (a checkpoint spotvisor asked for: request →
// good checkpoint); the rate is this upload's.
void MirrorObserver::Replan(std::uint64_t bytes, Duration took) {
  if (took <= Duration::zero() || bytes == 0) return;  // nothing measured (a virtual clock, an empty checkpoint)
  const auto save = LastSaveTime(cadence::ReadCheckpointRecords(job_.telemetry.state_dir));
  const double rate = static_cast<double>(bytes) / std::chrono::duration<double>(took).count();
  if (Status s = SaveUploadRate(job_.telemetry.state_dir, rate, clock_->WallNow()); !s) {
    Log(LogLevel::kWarning, "event=upload_rate_unsaved error=" + Quote(s.error().message));
  }
  const auto window = preemption::WarningWindow(config::ToString(job_.provider.kind), job_.provider);
  const DurabilityPlan plan = PlanDurability(window, save, bytes, rate);
  std::optional<bool> fitted;
  {
    std::lock_guard lock(mutex_);
    if (plan_) fitted = plan_->fits();
    plan_ = plan;
  }
  if (fitted && *fitted == plan.fits()) return;
  if (plan.fits()) {
    Log(LogLevel::kInfo, "event=durability_plan fits=true " + plan.Numbers());
  } else {
    Log(LogLevel::kWarning,
        "event=durability_at_risk " + plan.Numbers() + " advice=" + Quote(plan.Advice()) +
            " detail=\"a checkpoint saved on a notice would not reach the mirror before the provider's deadline\"");
  }
}

std::optional<DurabilityPlan> MirrorObserver::Plan() {
  std::lock_guard lock(mutex_);
  return plan_;
}

CopyControl MirrorObserver::Control(const std::stop_source& own) {
  CopyControl c;
  c.limiter = limiter_ ? &*limiter_ : nullptr;
  c.stop = own.get_token();
  return c;
}

// A virtual clock must not jump to the next timer while an upload copies (nor move while it
// logs what it did). Tokens are taken on the io thread only (Enqueue from the feed or a
// selection, OnExit) or while one is held (Enqueue from OnExit's task); any thread releases.
void MirrorObserver::HoldClockLocked() {
  if (busy_ == 0) {
    holding_.reset();
  } else if (!holding_ && clock_) {
    holding_ = clock_->BackgroundWork();
  }
}

int MirrorObserver::Keep() const {
  return job_.checkpoints.mirror.keep > 0 ? job_.checkpoints.mirror.keep : job_.checkpoints.keep;
}

}  // namespace spotvisor::mirror

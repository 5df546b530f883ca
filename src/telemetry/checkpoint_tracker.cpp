// Checkpoint tracking; see checkpoint_tracker.hpp. The scan state (pending, judged) lives
// on the tracker's one worker thread; results cross to the io thread by asio::post.
#include "spotvisor/telemetry/checkpoint_tracker.hpp"

#include <fcntl.h>
#include <sys/stat.h>

#include <boost/asio/io_context.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/thread_pool.hpp>
#include <map>

#include "spotvisor/checkpoint/name_pattern.hpp"
#include "spotvisor/checkpoint/validator.hpp"
#include "spotvisor/state/journal.hpp"

namespace spotvisor::telemetry {
namespace {

namespace asio = boost::asio;
constexpr int kMaxFilesWalked = 100000;

std::int64_t Ms(const statx_timestamp& t) { return t.tv_sec * 1000 + t.tv_nsec / 1000000; }

bool Stat(const std::filesystem::path& p, struct statx& st) {
  return statx(AT_FDCWD, p.c_str(), AT_SYMLINK_NOFOLLOW, STATX_SIZE | STATX_MTIME | STATX_BTIME | STATX_TYPE, &st) == 0;
}

void Add(CheckpointShape& shape, const struct statx& st, bool& birth_known) {
  shape.bytes += st.stx_size;
  shape.mtime_ms = std::max(shape.mtime_ms, Ms(st.stx_mtime));
  if (st.stx_mask & STATX_BTIME) {
    const auto b = Ms(st.stx_btime);
    shape.birth_ms = shape.birth_ms ? std::min(*shape.birth_ms, b) : b;
  } else {
    birth_known = false;
  }
}

}  // namespace

std::optional<CheckpointShape> MeasureCheckpoint(const std::filesystem::path& path) {
  struct statx st {};
  if (!Stat(path, st)) return std::nullopt;
  CheckpointShape shape;
  bool birth_known = true;
  if (!S_ISDIR(st.stx_mode)) {
    Add(shape, st, birth_known);
  } else {
    std::error_code ec;
    int walked = 0;
    for (auto it = std::filesystem::recursive_directory_iterator(path, ec);
         !ec && it != std::filesystem::recursive_directory_iterator() && ++walked < kMaxFilesWalked; it.increment(ec)) {
      struct statx f {};
      if (Stat(it->path(), f) && S_ISREG(f.stx_mode)) Add(shape, f, birth_known);
    }
    if (ec) return std::nullopt;
  }
  if (!birth_known) shape.birth_ms.reset();
  return shape;
}

struct CheckpointTracker::Impl : std::enable_shared_from_this<CheckpointTracker::Impl> {
  Impl(asio::io_context& io_in, const config::JobConfig& job, Duration interval_in, OnNew on_new_in)
      : io(io_in), timer(io_in), interval(interval_in), on_new(std::move(on_new_in)) {
    if (job.checkpoints.dir) dir = *job.checkpoints.dir;
    if (auto p = checkpoint::NamePattern::Parse(job.checkpoints.pattern)) pattern.emplace(*p);
    options.level = job.checkpoints.validate;
    options.format = job.checkpoints.format;
    options.marker = job.checkpoints.marker;
    options.root = dir;
  }

  // ---- worker thread ----
  void Scan() {
    std::error_code ec;
    std::map<std::string, std::pair<std::uint64_t, CheckpointShape>> now;
    for (auto it = std::filesystem::directory_iterator(dir, ec); !ec && it != std::filesystem::directory_iterator();
         it.increment(ec)) {
      const std::string name = it->path().filename().string();
      const auto step = pattern->Match(name);
      if (!step) continue;
      if (auto shape = MeasureCheckpoint(it->path())) now[name] = {*step, *shape};
    }
    for (const auto& [name, entry] : now) {
      const auto& [step, shape] = entry;
      if (!baseline_taken) {
        judged[name] = shape;
        continue;
      }
      if (auto j = judged.find(name); j != judged.end() && j->second == shape) continue;
      const auto p = pending.find(name);
      if (p == pending.end() || !(p->second == shape)) {
        pending[name] = shape;  // new or still changing: judge once it holds still
        continue;
      }
      pending.erase(p);
      judged[name] = shape;
      Judge(name, step, shape);
    }
    baseline_taken = true;
  }

  void Judge(const std::string& name, std::uint64_t step, const CheckpointShape& shape) {
    const auto path = dir / name;
    const auto verdict = checkpoint::ValidateCheckpoint(path, options);
    CheckpointRecord r;
    r.name = name;
    r.step = step;
    r.bytes = shape.bytes;
    r.mtime_ms = shape.mtime_ms;
    if (shape.birth_ms && shape.mtime_ms >= *shape.birth_ms) r.write_ms = shape.mtime_ms - *shape.birth_ms;
    r.good = verdict.good;
    r.reason = verdict.reason;
    r.seen_ms = state::UnixMillisNow();
    asio::post(io, [self = shared_from_this(), r, path] {
      if (!self->stopped) self->on_new(r, path);
    });
  }

  // ---- io thread ----
  void Arm() {
    timer.expires_after(interval);
    timer.async_wait([self = shared_from_this()](const boost::system::error_code& ec) {
      if (ec || self->stopped) return;
      self->Post();
      self->Arm();
    });
  }
  void Post() {
    if (!pattern || dir.empty()) return;
    asio::post(pool, [self = shared_from_this()] { self->Scan(); });
  }

  asio::io_context& io;
  asio::steady_timer timer;                          // the scan period
  asio::thread_pool pool{1};                         // scans and validation
  Duration interval;
  OnNew on_new;                                      // io thread
  std::filesystem::path dir;                         // checkpoints.dir
  std::optional<checkpoint::NamePattern> pattern;    // checkpoints.pattern
  checkpoint::ValidatorOptions options;              // the job's validation
  bool stopped = false;                              // io thread
  // worker thread only:
  bool baseline_taken = false;
  std::map<std::string, CheckpointShape> judged;     // name -> shape when judged
  std::map<std::string, CheckpointShape> pending;    // name -> shape at the last scan
};

CheckpointTracker::CheckpointTracker(asio::io_context& io, const config::JobConfig& job, Duration interval, OnNew on_new)
    : impl_(std::make_shared<Impl>(io, job, interval, std::move(on_new))) {}

CheckpointTracker::~CheckpointTracker() {
  Stop();
  impl_->pool.join();
}

void CheckpointTracker::Start(std::set<std::string> known) {
  asio::post(impl_->pool, [impl = impl_, known = std::move(known)] {
    for (const auto& name : known) impl->judged[name] = CheckpointShape{};
  });
  impl_->Post();
  impl_->Arm();
}

void CheckpointTracker::ScanNow() {
  if (!impl_->stopped) impl_->Post();
}

void CheckpointTracker::Stop() {
  impl_->stopped = true;
  impl_->timer.cancel();
}

}  // namespace spotvisor::telemetry

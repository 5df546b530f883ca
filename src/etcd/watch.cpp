// Watch and SnapshotWatch: one LineStream at a time, reopened on the next member from
// next_revision after a loss (at once for each member in turn, then with a growing pause,
// on the client's clock). The stream itself holds no BackgroundWork: it stays open for good,
// and a virtual clock must move while it waits for events.
// Every entry point holds a shared_ptr to its Impl and checks `stopped` after each handler
// of the owner, who may destroy the watch from inside it.
#include "spotvisor/etcd/watch.hpp"

#include <algorithm>

#include "line_stream.hpp"
#include "spotvisor/etcd/wire.hpp"
#include "spotvisor/util/clock.hpp"

namespace spotvisor::etcd {
namespace {

constexpr Duration kFirstPause = std::chrono::milliseconds(100);  // after a round of members failed
constexpr Duration kLongestPause = std::chrono::seconds(2);       // the pause stops growing here

bool AuthProblem(const std::string& reason) {
  return reason.find("Unauthenticated") != std::string::npos || reason.find("auth token") != std::string::npos;
}

}  // namespace

struct Watch::Impl : std::enable_shared_from_this<Impl> {
  Impl(Client& c, WatchOptions o, WatchHandlers h)
      : client(c),
        options(std::move(o)),
        handlers(std::move(h)),
        retry(c.clock().MakeTimer(c.transport().io())),
        next_revision(options.start_revision),
        member(c.transport().preferred()) {}

  Client& client;                      // the owner's; outlives the watch
  WatchOptions options;                // what to watch
  WatchHandlers handlers;              // the owner's
  std::unique_ptr<Timer> retry;        // the pause before reopening
  std::unique_ptr<LineStream> stream;  // the open stream, if any
  std::int64_t next_revision = 0;      // where the next stream starts (0: now)
  std::size_t member = 0;              // index of the member of the current stream
  int failures = 0;                    // streams lost in a row without a `created`
  bool stopped = false;                // destroyed, or ended by a compaction

  void Open() {
    auto weak = weak_from_this();
    client.transport().Token(client.request_timeout(), [weak](Result<std::string> token) {
      auto self = weak.lock();
      if (!self || self->stopped) return;
      if (!token) return self->Lost(token.error().message);
      self->OpenWith(*token);
    });
  }

  void OpenWith(const std::string& token) {
    LineStreamRequest request;
    request.target = "/v3/watch";
    request.headers.emplace_back("Grpc-Metadata-hasleader", "true");
    if (!token.empty()) request.headers.emplace_back("Authorization", token);
    request.body = EncodeWatchCreate({options.key, options.prefix ? PrefixEnd(options.key) : std::string(),
                                      next_revision, options.prev_kv, /*progress_notify=*/true});
    request.open_timeout = client.request_timeout();
    auto weak = weak_from_this();
    LineStream::Handlers h;
    h.line = [weak](std::string_view line) {
      if (auto self = weak.lock(); self && !self->stopped) self->OnLine(line);
    };
    h.ended = [weak](bool, std::string why) {
      if (auto self = weak.lock(); self && !self->stopped) self->Lost(std::move(why));
    };
    const auto& members = client.transport().members();
    stream = std::make_unique<LineStream>(client.transport().io(), members[member % members.size()],
                                          client.transport().tls(), std::move(request), std::move(h));
    stream->Start();
  }

  void OnLine(std::string_view line) {
    auto self = shared_from_this();
    auto response = ParseWatchLine(line);
    if (!response) return Lost(WatchUrl() + ": " + response.error().message);
    if (response->canceled) return Canceled(*response);
    if (response->created) {
      failures = 0;
      client.transport().Prefer(member);
      if (next_revision == 0) next_revision = response->header.revision + 1;
      if (handlers.connection) handlers.connection(true, "watching through " + MemberUrl());
      return;
    }
    if (response->events.empty()) {  // progress: nothing up to header.revision
      next_revision = std::max(next_revision, response->header.revision + 1);
      return;
    }
    std::vector<Event> fresh;
    for (auto& e : response->events) {
      if (e.kv.mod_revision >= next_revision) fresh.push_back(std::move(e));
    }
    if (fresh.empty()) return;
    next_revision = fresh.back().kv.mod_revision + 1;
    handlers.events(fresh);
  }

  void Canceled(const WatchResponse& response) {
    if (response.compact_revision > 0) {
      stopped = true;
      stream.reset();
      if (handlers.compacted) handlers.compacted(response.compact_revision);
      return;
    }
    if (AuthProblem(response.cancel_reason)) client.transport().ForgetToken();
    const std::string why = response.cancel_reason.empty() ? "no reason given" : response.cancel_reason;
    Lost(WatchUrl() + ": the server canceled the watch: " + why);
  }

  // The stream is gone: say so, then reopen it on the next member.
  void Lost(std::string why) {
    auto self = shared_from_this();
    stream.reset();
    const std::size_t count = client.transport().members().size();
    member = (member + 1) % count;
    const int over = std::max(0, failures - static_cast<int>(count) + 1);
    ++failures;
    const Duration pause = over == 0 ? Duration(0) : std::min(kLongestPause, kFirstPause * (1 << std::min(over, 5)));
    if (handlers.connection) handlers.connection(false, why);
    if (stopped) return;
    auto weak = weak_from_this();
    retry->After(pause, [weak] {
      if (auto s = weak.lock(); s && !s->stopped) s->Open();
    });
  }

  std::string MemberUrl() const {
    const auto& members = client.transport().members();
    return members[member % members.size()].url;
  }
  std::string WatchUrl() const { return "POST " + MemberUrl() + "/v3/watch"; }
};

Watch::Watch(Client& client, WatchOptions options, WatchHandlers handlers)
    : impl_(std::make_shared<Impl>(client, std::move(options), std::move(handlers))) {}

Watch::~Watch() {
  impl_->stopped = true;
  impl_->retry->Cancel();
  impl_->stream.reset();
}

void Watch::Start() { impl_->Open(); }

std::int64_t Watch::next_revision() const { return impl_->next_revision; }

struct SnapshotWatch::Impl : std::enable_shared_from_this<Impl> {
  Impl(Client& c, std::string p, SnapshotWatchHandlers h, Duration d)
      : client(c),
        prefix(std::move(p)),
        handlers(std::move(h)),
        retry_delay(d),
        retry(c.clock().MakeTimer(c.transport().io())) {}

  Client& client;                  // the owner's; outlives this
  std::string prefix;              // what to follow
  SnapshotWatchHandlers handlers;  // the owner's
  Duration retry_delay;            // after a failed read
  std::unique_ptr<Timer> retry;    // schedules reads
  std::unique_ptr<Watch> watch;    // from the snapshot's revision + 1
  bool stopped = false;            // destroyed

  void Read() {
    watch.reset();
    auto weak = weak_from_this();
    client.Range({prefix, PrefixEnd(prefix)}, [weak](Result<RangeResponse> snapshot) {
      auto self = weak.lock();
      if (!self || self->stopped) return;
      if (!snapshot) return self->ReadFailed(snapshot.error().message);
      self->handlers.snapshot(*snapshot);
      if (self->stopped) return;
      self->WatchFrom(snapshot->header.revision + 1);
    });
  }

  void ReadFailed(const std::string& why) {
    if (handlers.connection) handlers.connection(false, why);
    if (stopped) return;
    auto weak = weak_from_this();
    retry->After(retry_delay, [weak] {
      if (auto self = weak.lock(); self && !self->stopped) self->Read();
    });
  }

  void WatchFrom(std::int64_t revision) {
    auto weak = weak_from_this();
    WatchHandlers h;
    h.events = [weak](const std::vector<Event>& events) {
      if (auto self = weak.lock(); self && !self->stopped) self->handlers.events(events);
    };
    h.compacted = [weak](std::int64_t) {
      auto self = weak.lock();
      if (!self || self->stopped) return;
      self->retry->After(Duration(0), [weak] {  // not from inside the watch's own handler
        if (auto s = weak.lock(); s && !s->stopped) s->Read();
      });
    };
    h.connection = [weak](bool connected, const std::string& why) {
      auto self = weak.lock();
      if (self && !self->stopped && self->handlers.connection) self->handlers.connection(connected, why);
    };
    watch = std::make_unique<Watch>(client, WatchOptions{prefix, true, revision, false}, std::move(h));
    watch->Start();
  }
};

SnapshotWatch::SnapshotWatch(Client& client, std::string prefix, SnapshotWatchHandlers handlers, Duration retry_delay)
    : impl_(std::make_shared<Impl>(client, std::move(prefix), std::move(handlers), retry_delay)) {}

SnapshotWatch::~SnapshotWatch() {
  impl_->stopped = true;
  impl_->retry->Cancel();
  impl_->watch.reset();
}

void SnapshotWatch::Start() { impl_->Read(); }

}  // namespace spotvisor::etcd

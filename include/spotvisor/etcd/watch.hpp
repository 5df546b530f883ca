// A watch on a key or a prefix that survives lost connections: the stream is reopened on
// the next member from the revision after the last one seen, so events arrive once each,
// in revision order. Progress notifications are asked for, and the stream carries
// `Grpc-Metadata-hasleader: true` so that a member without quorum ends it (etcd#10819)
// and the watch moves on. A start revision that was compacted away ends the watch and is
// reported: re-read, then watch again (SnapshotWatch does both). io_context thread; the
// owner keeps the Client alive longer than the watch; no handler runs after destruction.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "spotvisor/etcd/client.hpp"
#include "spotvisor/etcd/types.hpp"

namespace spotvisor::etcd {

struct WatchOptions {
  std::string key;                  // the key, or the prefix
  bool prefix = false;              // every key that starts with `key`
  std::int64_t start_revision = 0;  // first revision to report (0: from when the stream opens)
  bool prev_kv = false;             // events carry the pair before them
};

struct WatchHandlers {
  // Events of one or more revisions, oldest first; never a revision twice.
  std::function<void(const std::vector<Event>& events)> events;
  // `start_revision` (or the next revision after a reconnect) is older than the compacted
  // revision: the watch has stopped; read again at or after `compact_revision`.
  std::function<void(std::int64_t compact_revision)> compacted;
  // The stream opened (true) or was lost (false, with why): for logs and metrics. The watch
  // keeps trying every member until it is destroyed.
  std::function<void(bool connected, const std::string& why)> connection;
};

class Watch {
 public:
  Watch(Client& client, WatchOptions options, WatchHandlers handlers);
  ~Watch();
  Watch(const Watch&) = delete;
  Watch& operator=(const Watch&) = delete;

  // Opens the stream (asynchronously).
  void Start();
  // The revision the next stream would start from (the last event's or progress
  // notification's revision + 1).
  std::int64_t next_revision() const;

 private:
  struct Impl;
  std::shared_ptr<Impl> impl_;  // shared with the stream's handlers
};

// Reads every key under a prefix at one revision R, hands the pairs over, then watches from
// R + 1; when the watch reports a compaction it does both again (a fresh snapshot). Errors
// of the read are reported and the read is retried after `retry_delay`.
struct SnapshotWatchHandlers {
  std::function<void(const RangeResponse& snapshot)> snapshot;             // at the start and after a compaction
  std::function<void(const std::vector<Event>& events)> events;            // after the snapshot's revision
  std::function<void(bool connected, const std::string& why)> connection;  // as WatchHandlers::connection
};

class SnapshotWatch {
 public:
  SnapshotWatch(Client& client, std::string prefix, SnapshotWatchHandlers handlers,
                Duration retry_delay = std::chrono::milliseconds(500));
  ~SnapshotWatch();
  SnapshotWatch(const SnapshotWatch&) = delete;
  SnapshotWatch& operator=(const SnapshotWatch&) = delete;

  void Start();

 private:
  struct Impl;
  std::shared_ptr<Impl> impl_;  // shared with the read's and the watch's handlers
};

}  // namespace spotvisor::etcd

// Keeps one lease alive: a keepalive (one POST each, etcd#8237) every third of the TTL, to
// whichever member answers. Reports the loss once, then stops: etcd answered without a TTL
// (the lease expired or was revoked), or no member answered before the lease's time ran out.
// io_context thread; the owner keeps the Client alive longer; nothing runs after destruction.
#pragma once

#include <functional>
#include <memory>
#include <string>

#include "spotvisor/etcd/client.hpp"

namespace spotvisor::etcd {

class LeaseKeeper {
 public:
  // `ttl_seconds` as granted (LeaseGrantResponse::ttl): the lease is taken to be fresh now.
  LeaseKeeper(Client& client, std::int64_t lease_id, std::int64_t ttl_seconds, std::function<void(Error)> lost);
  ~LeaseKeeper();  // stops renewing; the lease then lapses after its TTL (revoke it to end it at once)
  LeaseKeeper(const LeaseKeeper&) = delete;
  LeaseKeeper& operator=(const LeaseKeeper&) = delete;

  void Start();
  std::int64_t lease_id() const;
  // Keepalives answered so far (for tests and metrics).
  std::uint64_t renewals() const;
  // The lease is certainly alive: not lost, and its TTL since the last renewal (or the grant)
  // has not run out by the client's clock. A process that was stopped or starved past its TTL
  // knows at once, before any keepalive is answered.
  bool Fresh() const;

 private:
  struct Impl;
  std::shared_ptr<Impl> impl_;  // shared with the pending keepalive's handler
};

}  // namespace spotvisor::etcd

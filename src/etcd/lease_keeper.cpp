// LeaseKeeper: a timer at a third of the TTL sends one keepalive whose deadline is the time
// the lease has left; a failed one is retried every few hundred ms until that time is up.
// Both are measured on the client's clock.
#include "spotvisor/etcd/lease_keeper.hpp"

#include <algorithm>
#include <chrono>

#include "spotvisor/util/clock.hpp"

namespace spotvisor::etcd {
namespace {

constexpr Duration kRetryPause = std::chrono::milliseconds(200);  // after a keepalive no member answered

}  // namespace

struct LeaseKeeper::Impl : std::enable_shared_from_this<Impl> {
  Impl(Client& c, std::int64_t lease, std::int64_t ttl_seconds, std::function<void(Error)> l)
      : client(c),
        id(lease),
        ttl(std::chrono::seconds(ttl_seconds)),
        lost(std::move(l)),
        timer(c.clock().MakeTimer(c.transport().io())),
        expiry(c.clock().Now() + ttl) {}

  Client& client;                   // the owner's
  std::int64_t id;                  // the lease
  Duration ttl;                     // as granted or last renewed
  std::function<void(Error)> lost;  // the owner's
  std::unique_ptr<Timer> timer;     // the next keepalive
  SteadyTime expiry;                // when the lease lapses without a renewal
  std::uint64_t renewals = 0;       // keepalives answered with a TTL
  bool stopped = false;             // destroyed or lost

  void Schedule(Duration delay) {
    auto weak = weak_from_this();
    timer->After(delay, [weak] {
      if (auto self = weak.lock(); self && !self->stopped) self->Send();
    });
  }

  void Send() {
    const auto sent = client.clock().Now();
    const auto left = std::chrono::duration_cast<Duration>(expiry - sent);
    if (left <= Duration(0)) return Lose("no etcd member answered a keepalive before its TTL ran out");
    auto weak = weak_from_this();
    client.LeaseKeepAliveOnce(id, left, [weak, sent](Result<LeaseKeepAliveResponse> answer) {
      auto self = weak.lock();
      if (!self || self->stopped) return;
      if (!answer) {
        self->last_error = answer.error().message;
        return self->Schedule(std::min<Duration>(
            kRetryPause, std::chrono::duration_cast<Duration>(self->expiry - self->client.clock().Now())));
      }
      if (answer->ttl <= 0) return self->Lose("etcd answered a keepalive without TTL: the lease expired");
      ++self->renewals;
      self->ttl = std::chrono::seconds(answer->ttl);
      self->expiry = sent + self->ttl;
      self->Schedule(self->ttl / 3);
    });
  }

  void Lose(const std::string& why) {
    stopped = true;
    timer->Cancel();
    std::string message = "etcd lease " + std::to_string(id) + " lost: " + why;
    if (!last_error.empty()) message += " (last error: " + last_error + ")";
    if (lost) lost(Error{message});
  }

  std::string last_error;  // of the last failed keepalive, for the loss message
};

LeaseKeeper::LeaseKeeper(Client& client, std::int64_t lease_id, std::int64_t ttl_seconds,
                         std::function<void(Error)> lost)
    : impl_(std::make_shared<Impl>(client, lease_id, ttl_seconds, std::move(lost))) {}

LeaseKeeper::~LeaseKeeper() {
  impl_->stopped = true;
  impl_->timer->Cancel();
}

void LeaseKeeper::Start() { impl_->Schedule(impl_->ttl / 3); }

bool LeaseKeeper::Fresh() const { return !impl_->stopped && impl_->client.clock().Now() < impl_->expiry; }
std::int64_t LeaseKeeper::lease_id() const { return impl_->id; }
std::uint64_t LeaseKeeper::renewals() const { return impl_->renewals; }

}  // namespace spotvisor::etcd

// The mirror's finished uploads, from its upload thread to the io thread (see
// mirror_uploads.hpp). The callback runs on the upload thread; the rest on the io thread.
#include "mirror_uploads.hpp"

#include <boost/asio/post.hpp>

#include "spotvisor/mirror/mirror_observer.hpp"

namespace spotvisor::telemetry {

MirrorUploads::MirrorUploads(mirror::MirrorObserver& mirror, std::function<void()> ready)
    : feed_(std::make_shared<Feed>()), ready_(std::move(ready)) {
  feed_->owner = this;
  mirror.SubscribeUploaded(
      [feed = feed_](const mirror::MirrorItem& item, const std::optional<mirror::DurabilityPlan>& plan) {
        std::lock_guard lock(feed->mutex);
        if (!feed->owner || !feed->io || !feed->clock) return;
        feed->done.push_back({item.name, item.step, UnixMillis(feed->clock->WallNow()), plan});
        boost::asio::post(*feed->io, [feed] {
          MirrorUploads* owner = nullptr;
          {
            std::lock_guard read(feed->mutex);
            owner = feed->owner;
          }
          if (owner) owner->ready_();
        });
      });
}

void MirrorUploads::Attach(boost::asio::io_context& io, Clock& clock) {
  clock_ = &clock;
  std::lock_guard lock(feed_->mutex);
  feed_->io = &io;
  feed_->clock = &clock;
}

void MirrorUploads::Detach() {
  std::lock_guard lock(feed_->mutex);
  feed_->owner = nullptr;
}

bool MirrorUploads::Take(RunLedger& ledger) {
  std::vector<Feed::Done> done;
  {
    std::lock_guard lock(feed_->mutex);
    done.swap(feed_->done);
  }
  if (done.empty()) return false;
  for (const auto& d : done) {
    MatchMirrored(ledger, d.name, d.at_ms);
    if (!newest_durable_ || d.step >= newest_durable_->first) newest_durable_ = std::pair{d.step, d.at_ms};
    durable_.push_back({d.step, d.at_ms});
    if (d.plan) durability_ = d.plan;
  }
  // A notice whose deadline passed is settled now, so only the last uploads need keeping.
  SettleDurable(ledger, durable_, UnixMillis(clock_->WallNow()));
  constexpr std::size_t kDurableKept = 1024;
  if (durable_.size() > kDurableKept) durable_.erase(durable_.begin(), durable_.end() - kDurableKept);
  return true;
}

void MirrorUploads::SettleAll(RunLedger& ledger) const { SettleDurable(ledger, durable_, std::nullopt); }

}  // namespace spotvisor::telemetry

// GCP: `instance/preempted` and `instance/maintenance-event`, each long-polled on its own
// connection with wait_for_change + last_etag + timeout_sec, so a flip is seen the moment
// the metadata server answers. A key answered with 404 (GKE Workload Identity hides them)
// is given up with one warning: supervision goes on with SIGTERM alone. Retries and the
// spin guard run on the Clock it is made with. io thread only.
#pragma once

#include <array>
#include <chrono>
#include <memory>
#include <string>

#include "spotvisor/http/http_client.hpp"
#include "spotvisor/util/clock.hpp"
#include "watcher_support.hpp"

namespace spotvisor::preemption {

class GcpWatcher final : public WatcherBase {
 public:
  GcpWatcher(boost::asio::io_context& io, Clock& clock, http::Endpoint endpoint, const config::ProviderSection& cfg,
             const WatcherTuning& tuning);

 private:
  // One long-polled key.
  struct Subscription {
    Subscription(boost::asio::io_context& io, Clock& clock, const http::Endpoint& endpoint, std::string key_path,
                 Duration backoff_base, Duration backoff_max);
    std::string key;                // e.g. "instance/preempted"
    http::HttpClient client;        // its own connection: a long-poll holds it
    std::unique_ptr<Timer> timer;   // delay before the next request
    ConditionLog condition;         // state of this key's endpoint
    Backoff backoff;                // after errors other than 503
    std::string etag;               // last ETag seen; empty = plain GET next
    std::string value;              // last value seen
    bool have_value = false;        // `value` is meaningful
    SteadyTime sent_at;             // when the request in flight was sent
    int fast_answers = 0;           // long-polls in a row answered sooner than the interval
    std::uint64_t transitions = 0;  // notices raised on this key (for ids without ETag)
  };

  void OnStart() override;
  void OnStop() override;
  void Request(Subscription& sub);
  void OnAnswer(Subscription& sub, http::HttpOutcome outcome);
  // Reports the meaning of `sub.value`; false when the watcher was stopped meanwhile.
  bool Interpret(Subscription& sub);
  void Retry(Subscription& sub, Duration delay);
  // A 404 for the key: the GKE metadata server (Workload Identity) hides it. No more polls.
  void Hidden(Subscription& sub);

  Clock& clock_;                                       // the host's: retries, answer times, deadlines
  config::ProviderSection cfg_;                        // window, intervals
  WatcherTuning tuning_;                               // timeout_sec, 503 delay
  std::array<std::unique_ptr<Subscription>, 2> subs_;  // preempted, maintenance-event
  bool hidden_warned_ = false;                         // the one warning about hidden keys was given
};

}  // namespace spotvisor::preemption

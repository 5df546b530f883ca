// Azure Scheduled Events: polls /metadata/scheduledevents (Metadata: true) at the poll
// interval (>= 1 s: IMDS allows 5 requests/s), keeps the events of the configured types
// that name this VM, reports each EventId once, and acknowledges (StartRequests) on
// request. The VM name comes from the instance metadata unless configured. Polls and the
// backoff run on the Clock it is made with. io thread only.
#pragma once

#include <chrono>
#include <deque>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "spotvisor/http/http_client.hpp"
#include "spotvisor/preemption/notice_parsers.hpp"
#include "spotvisor/util/clock.hpp"
#include "watcher_support.hpp"

namespace spotvisor::preemption {

class AzureWatcher final : public WatcherBase {
 public:
  AzureWatcher(boost::asio::io_context& io, Clock& clock, http::Endpoint endpoint, const config::ProviderSection& cfg,
               const WatcherTuning& tuning);
  void Acknowledge(const Notice& notice) override;

 private:
  void OnStart() override;
  void OnStop() override;
  void FetchVmName();
  void Poll();
  void OnEvents(http::HttpOutcome outcome);
  bool Matches(const AzureEvent& event) const;
  Notice ToNotice(const AzureEvent& event) const;
  void Schedule(Duration delay, void (AzureWatcher::*step)());
  void SendNextAck();

  Clock& clock_;                                               // the host's: polls, backoff, deadlines
  http::HttpClient client_;                                    // polls
  http::HttpClient ack_client_;                                // acknowledgements, so they never wait for a poll
  std::unique_ptr<Timer> timer_;                               // the next poll (or name lookup)
  config::ProviderSection cfg_;                                // types, name, interval, acknowledge
  WatcherTuning tuning_;                                       // first-call timeout, minimum interval
  Duration interval_;                                          // effective poll interval
  Backoff backoff_;                                            // after failures (429 included)
  ConditionLog name_condition_;                                // state of the instance-name lookup
  ConditionLog events_condition_;                              // state of the scheduled-events endpoint
  std::string vm_name_;                                        // whose events count
  bool answered_once_ = false;                                 // the first call (which may take 2 min) is done
  SteadyTime poll_start_;                                      // when the poll in flight began
  std::set<std::string> active_ids_;                           // matching events present in the last document
  std::map<std::string, std::vector<std::string>> resources_;  // EventId -> Resources
  std::deque<std::string> ack_queue_;                          // EventIds waiting to be acknowledged
};

}  // namespace spotvisor::preemption

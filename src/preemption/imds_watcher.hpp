// The token-based instance-metadata watcher shared by AWS (IMDSv2) and Alibaba: a session
// token with a TTL, renewed before it expires and once on a 401, then a GET per probe path
// (404 = no notice, 200 = a notice the dialect interprets). Rounds, the token's renewal and
// the backoff run on the Clock it is made with. io thread only.
#pragma once

#include <chrono>
#include <functional>
#include <string>
#include <vector>

#include "spotvisor/http/http_client.hpp"
#include "spotvisor/util/clock.hpp"
#include "watcher_support.hpp"

namespace spotvisor::preemption {

// One metadata path polled every round.
struct ImdsProbe {
  std::string slot;  // the notice-book slot, e.g. "instance-action"
  std::string path;  // e.g. "/latest/meta-data/spot/instance-action"
  // Turns a 200 body into a notice (`now`: the wall time it arrived, for a deadline the body
  // does not give); an Error is logged as garbage and gives no notice.
  std::function<Result<Notice>(std::string_view body, WallTime now)> interpret;
};

// What differs between AWS and Alibaba.
struct ImdsDialect {
  std::string provider;      // "aws" or "alibaba"
  std::string token_path;    // "/latest/api/token"
  std::string ttl_header;    // request header of the token PUT carrying the TTL in seconds
  std::string token_header;  // request header carrying the token on GETs
  std::vector<ImdsProbe> probes;
};

class ImdsWatcher final : public WatcherBase {
 public:
  ImdsWatcher(boost::asio::io_context& io, Clock& clock, http::Endpoint endpoint, const config::ProviderSection& cfg,
              const WatcherTuning& tuning, ImdsDialect dialect);

 private:
  void OnStart() override;
  void OnStop() override;
  void Poll();  // one round: token if needed, probes
  bool NeedToken() const;
  void FetchToken(std::function<void()> next);  // PUT the token, then `next`
  void TokenFailed(const std::string& key, const std::string& message, std::function<void()> next);
  void RunProbe(std::size_t index);  // GET probe `index`, then the next
  void OnProbe(std::size_t index, http::HttpOutcome outcome);
  void EndRound(bool ok);  // schedule the next round

  Clock& clock_;                                // the host's: rounds, token renewal, backoff
  http::HttpClient client_;                     // one kept-alive connection to the service
  std::unique_ptr<Timer> timer_;                // the next round
  config::ProviderSection cfg_;                 // intervals, TTL, fallback
  WatcherTuning tuning_;                        // backoff ceiling, refresh margin
  ImdsDialect dialect_;                         // paths and header names
  Backoff backoff_;                             // delay after failed rounds
  ConditionLog token_condition_;                // state of the token endpoint
  std::vector<ConditionLog> probe_conditions_;  // state of each probe path
  std::string token_;                           // current session token; empty = none
  SteadyTime token_refresh_at_;                 // renew from this moment on
  SteadyTime v1_until_;                         // token failed with fallback on: plain GETs until then
  SteadyTime round_start_;                      // when the current round began
  bool retried_401_ = false;                    // this round already fetched a fresh token after a 401
  bool round_failed_ = false;                   // some probe of this round failed
};

}  // namespace spotvisor::preemption

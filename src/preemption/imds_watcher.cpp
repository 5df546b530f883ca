// The IMDS polling round. Order per round: token (when missing or about to expire), then
// every probe on the same kept-alive connection. A 401 drops the token and fetches a
// fresh one once per round; a second 401 fails the round (backoff). A token PUT that times
// out is logged with the hop-limit explanation, because that is what it almost always is.
#include "imds_watcher.hpp"

#include <algorithm>
#include <cctype>

#include "spotvisor/log/log.hpp"
#include "spotvisor/preemption/notice_parsers.hpp"

namespace spotvisor::preemption {

using log::Log;
using log::LogLevel;
using log::Quote;
namespace {

constexpr std::chrono::seconds kMaxTokenTtl{21600};  // both services: 1 s .. 6 h
// With imdsv1_fallback, how long plain GETs are used before a token is tried again.
constexpr std::chrono::seconds kV1Period{60};
constexpr std::size_t kMaxTokenSize = 4096;

constexpr const char* kHopLimitHint =
    "the token PUT got no answer in time; from a container or a pod without host networking "
    "this is the instance's metadata hop limit of 1 dropping the reply (set it to 2: aws ec2 "
    "modify-instance-metadata-options --http-put-response-hop-limit 2, or use host networking)";

bool PlausibleToken(std::string_view token) {
  if (token.empty() || token.size() > kMaxTokenSize) return false;
  return std::all_of(token.begin(), token.end(),
                     [](char c) { return std::isgraph(static_cast<unsigned char>(c)) != 0; });
}

}  // namespace

ImdsWatcher::ImdsWatcher(boost::asio::io_context& io, Clock& clock, http::Endpoint endpoint,
                         const config::ProviderSection& cfg, const WatcherTuning& tuning, ImdsDialect dialect)
    : clock_(clock),
      client_(io, std::move(endpoint)),
      timer_(clock.MakeTimer(io)),
      cfg_(cfg),
      tuning_(tuning),
      dialect_(std::move(dialect)),
      backoff_(cfg.poll_interval, ErrorBackoffCeiling(cfg, tuning, cfg.poll_interval)),
      token_condition_(clock, dialect_.provider, "token") {
  for (const auto& probe : dialect_.probes) probe_conditions_.emplace_back(clock, dialect_.provider, probe.path);
}

void ImdsWatcher::OnStart() {
  Log(LogLevel::kInfo,
      "event=watcher_start provider=" + Quote(dialect_.provider) + " endpoint=" + Quote(client_.endpoint().url) +
          " poll_interval_ms=" + std::to_string(cfg_.poll_interval.count()) + " backoff_max_ms=" +
          std::to_string(backoff_.max().count()) + " probes=" + std::to_string(dialect_.probes.size()));
  Poll();
}

void ImdsWatcher::OnStop() {
  client_.Cancel();
  timer_->Cancel();
}

void ImdsWatcher::Poll() {
  round_start_ = clock_.Now();
  retried_401_ = false;
  round_failed_ = false;
  if (NeedToken()) {
    FetchToken([this] { RunProbe(0); });
  } else {
    RunProbe(0);
  }
}

bool ImdsWatcher::NeedToken() const {
  const auto now = clock_.Now();
  if (!token_.empty()) return now >= token_refresh_at_;
  return now >= v1_until_;
}

void ImdsWatcher::FetchToken(std::function<void()> next) {
  const auto ttl = std::clamp(std::chrono::duration_cast<std::chrono::seconds>(cfg_.token_ttl), std::chrono::seconds(1),
                              kMaxTokenTtl);
  http::HttpRequest request;
  request.method = "PUT";
  request.target = dialect_.token_path;
  request.headers.push_back({dialect_.ttl_header, std::to_string(ttl.count())});
  request.timeout = cfg_.request_timeout;
  client_.Send(std::move(request), [this, ttl, next = std::move(next)](http::HttpOutcome outcome) {
    if (outcome.ok() && outcome.response.status == 200) {
      const std::string_view token = TrimSpace(outcome.response.body);
      if (!PlausibleToken(token)) {
        TokenFailed("token_empty",
                    "token endpoint answered 200 with " +
                        std::string(token.empty() ? "an empty body" : "a body that is not a token"),
                    next);
        return;
      }
      token_ = std::string(token);
      const Duration margin =
          std::min<Duration>(tuning_.token_refresh_margin, std::chrono::duration_cast<Duration>(ttl) / 4);
      token_refresh_at_ = clock_.Now() + ttl - margin;
      token_condition_.Good();
      next();
      return;
    }
    if (outcome.error == http::HttpErrorKind::kTimeout) {
      TokenFailed("token_timeout", outcome.message + "; " + kHopLimitHint, next);
      return;
    }
    TokenFailed("token_" + ConditionKey(outcome), "token request: " + Describe(outcome), next);
  });
}

void ImdsWatcher::TokenFailed(const std::string& key, const std::string& message, std::function<void()> next) {
  token_.clear();
  if (cfg_.imdsv1_fallback) {
    token_condition_.Note(key, message + "; using plain GETs (provider.imdsv1_fallback)");
    v1_until_ = clock_.Now() + kV1Period;
    next();
    return;
  }
  token_condition_.Bad(key, message);
  EndRound(false);
}

void ImdsWatcher::RunProbe(std::size_t index) {
  if (index >= dialect_.probes.size()) {
    EndRound(!round_failed_);
    return;
  }
  http::HttpRequest request;
  request.target = dialect_.probes[index].path;
  if (!token_.empty()) request.headers.push_back({dialect_.token_header, token_});
  request.timeout = cfg_.request_timeout;
  client_.Send(std::move(request), [this, index](http::HttpOutcome outcome) { OnProbe(index, std::move(outcome)); });
}

void ImdsWatcher::OnProbe(std::size_t index, http::HttpOutcome outcome) {
  const ImdsProbe& probe = dialect_.probes[index];
  ConditionLog& condition = probe_conditions_[index];
  if (!outcome.ok()) {  // the service itself is not answering: no point in the next probe
    condition.Bad(ConditionKey(outcome), outcome.message);
    EndRound(false);
    return;
  }
  const int status = outcome.response.status;
  if (status == 401) {
    token_.clear();
    v1_until_ = {};
    if (!retried_401_) {
      retried_401_ = true;
      FetchToken([this, index] { RunProbe(index); });
      return;
    }
    condition.Bad("unauthorized", "401 Unauthorized even with a fresh token");
    EndRound(false);
    return;
  }
  if (status == 404) {
    condition.Good();
    if (!EmitAbsent(probe.slot)) return;
  } else if (status == 200) {
    auto notice = probe.interpret(outcome.response.body, clock_.WallNow());
    if (notice) {
      condition.Good();
      if (!Emit(probe.slot, *notice)) return;
    } else {
      condition.Bad("garbage", notice.error().message);
      round_failed_ = true;
    }
  } else {
    condition.Bad(ConditionKey(outcome), probe.path + ": " + Describe(outcome));
    round_failed_ = true;
  }
  RunProbe(index + 1);
}

void ImdsWatcher::EndRound(bool ok) {
  if (stopped()) return;
  Duration delay{0};
  if (ok) {
    backoff_.Reset();
    const auto next = round_start_ + cfg_.poll_interval;
    delay = std::max(Duration{0}, std::chrono::duration_cast<Duration>(next - clock_.Now()));
  } else {
    delay = backoff_.Next();
  }
  timer_->After(delay, [this] { Poll(); });
}

}  // namespace spotvisor::preemption

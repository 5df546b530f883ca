// GCP long-poll loop. An answer with a changed value re-polls at once; an unchanged value
// that came back sooner than poll_interval (an endpoint that ignores wait_for_change, or
// a broken proxy) waits out the interval, so the loop can never spin. 503 is retried
// after 1 s as Google's sample does; other errors back off.
#include "gcp_watcher.hpp"

#include <algorithm>
#include <cctype>

#include "spotvisor/log/log.hpp"
#include "spotvisor/preemption/notice_parsers.hpp"

namespace spotvisor::preemption {

using log::Log;
using log::LogLevel;
using log::Quote;
namespace {

constexpr const char* kBase = "/computeMetadata/v1/";
constexpr const char* kPreempted = "instance/preempted";
constexpr const char* kMaintenance = "instance/maintenance-event";
constexpr int kFastAnswersAllowed = 2;  // changed values answered at once before we slow down

std::string UrlEncode(std::string_view s) {
  static constexpr char kHex[] = "0123456789ABCDEF";
  std::string out;
  for (const char c : s) {
    const auto u = static_cast<unsigned char>(c);
    if (std::isalnum(u) || c == '-' || c == '_' || c == '.' || c == '~') {
      out.push_back(c);
    } else {
      out.push_back('%');
      out.push_back(kHex[u >> 4]);
      out.push_back(kHex[u & 15]);
    }
  }
  return out;
}

bool KnownValue(const std::string& key, const std::string& value) {
  if (key == kPreempted) return value == "TRUE" || value == "FALSE";
  return value == "NONE" || value == "MIGRATE_ON_HOST_MAINTENANCE" || value == "TERMINATE_ON_HOST_MAINTENANCE" ||
         value == "SHUTDOWN_ON_HOST_MAINTENANCE";
}

bool IsStop(const std::string& key, const std::string& value) {
  if (key == kPreempted) return value == "TRUE";
  return value == "TERMINATE_ON_HOST_MAINTENANCE" || value == "SHUTDOWN_ON_HOST_MAINTENANCE";
}

}  // namespace

GcpWatcher::Subscription::Subscription(boost::asio::io_context& io, Clock& clock, const http::Endpoint& endpoint,
                                       std::string key_path, Duration backoff_base, Duration backoff_max)
    : key(std::move(key_path)),
      client(io, endpoint),
      timer(clock.MakeTimer(io)),
      condition(clock, "gcp", key),
      backoff(backoff_base, backoff_max) {}

GcpWatcher::GcpWatcher(boost::asio::io_context& io, Clock& clock, http::Endpoint endpoint,
                       const config::ProviderSection& cfg, const WatcherTuning& tuning)
    : clock_(clock), cfg_(cfg), tuning_(tuning) {
  const Duration max = ErrorBackoffCeiling(cfg, tuning, cfg.poll_interval);
  subs_[0] = std::make_unique<Subscription>(io, clock, endpoint, kPreempted, cfg.poll_interval, max);
  subs_[1] = std::make_unique<Subscription>(io, clock, endpoint, kMaintenance, cfg.poll_interval, max);
}

void GcpWatcher::OnStart() {
  Log(LogLevel::kInfo, "event=watcher_start provider=gcp endpoint=" + Quote(subs_[0]->client.endpoint().url) +
                           " timeout_sec=" + std::to_string(tuning_.long_poll_timeout.count()) +
                           " backoff_max_ms=" + std::to_string(subs_[0]->backoff.max().count()) +
                           " keys=" + Quote(std::string(kPreempted) + "," + kMaintenance));
  for (auto& sub : subs_) Request(*sub);
}

void GcpWatcher::OnStop() {
  for (auto& sub : subs_) {
    sub->client.Cancel();
    sub->timer->Cancel();
  }
}

void GcpWatcher::Request(Subscription& sub) {
  http::HttpRequest request;
  request.target = std::string(kBase) + sub.key;
  request.headers.push_back({"Metadata-Flavor", "Google"});
  request.timeout = cfg_.request_timeout;
  if (!sub.etag.empty()) {
    request.target += "?wait_for_change=true&last_etag=" + UrlEncode(sub.etag) +
                      "&timeout_sec=" + std::to_string(tuning_.long_poll_timeout.count());
    // The server holds the answer up to timeout_sec: the client deadline must be later.
    request.timeout += std::chrono::duration_cast<Duration>(tuning_.long_poll_timeout);
  }
  sub.sent_at = clock_.Now();
  sub.client.Send(std::move(request), [this, &sub](http::HttpOutcome outcome) { OnAnswer(sub, std::move(outcome)); });
}

void GcpWatcher::OnAnswer(Subscription& sub, http::HttpOutcome outcome) {
  if (!outcome.ok()) {
    sub.condition.Bad(ConditionKey(outcome), outcome.message);
    Retry(sub, sub.backoff.Next());
    return;
  }
  const http::HttpResponse& response = outcome.response;
  if (response.status == 503) {  // during maintenance, per Google's sample
    sub.condition.Bad("status_503", "503 from the metadata server; retrying every " +
                                        std::to_string(tuning_.retry_after_503.count()) + "ms");
    Retry(sub, tuning_.retry_after_503);
    return;
  }
  if (response.status == 404) {
    Hidden(sub);
    return;
  }
  if (response.status != 200) {
    sub.condition.Bad(ConditionKey(outcome), sub.key + ": " + Describe(outcome));
    Retry(sub, sub.backoff.Next());
    return;
  }
  const std::string* flavor = response.Header("Metadata-Flavor");
  const std::string value(TrimSpace(response.body));
  if (flavor == nullptr || *flavor != "Google" || !KnownValue(sub.key, value)) {
    sub.condition.Bad("garbage", sub.key + ": not a GCE metadata answer (Metadata-Flavor " +
                                     (flavor ? "'" + OneLine(*flavor) + "'" : "missing") + ", body '" +
                                     OneLine(value.substr(0, 80)) + "')");
    Retry(sub, sub.backoff.Next());
    return;
  }
  sub.condition.Good();
  sub.backoff.Reset();
  const bool long_poll = !sub.etag.empty();
  const bool changed = !sub.have_value || sub.value != value;
  sub.value = value;
  sub.have_value = true;
  const std::string* etag = response.Header("ETag");
  sub.etag = etag ? *etag : std::string();
  if (!Interpret(sub)) return;

  const auto elapsed = std::chrono::duration_cast<Duration>(clock_.Now() - sub.sent_at);
  const bool fast = elapsed < cfg_.poll_interval;
  sub.fast_answers = (long_poll && fast) ? sub.fast_answers + 1 : 0;
  const bool spinning = long_poll && fast && (!changed || sub.fast_answers > kFastAnswersAllowed);
  if (sub.etag.empty() || spinning) {  // no long-poll possible, or it does not hold: poll
    Retry(sub, cfg_.poll_interval - elapsed);
    return;
  }
  Request(sub);
}

bool GcpWatcher::Interpret(Subscription& sub) {
  if (!IsStop(sub.key, sub.value)) return EmitAbsent(sub.key);
  if (book().Active(sub.key)) return true;  // still the same notice
  Notice n;
  n.provider = "gcp";
  n.kind = sub.key == kPreempted ? "preempt" : "maintenance";
  n.action = NoticeAction::kStop;
  n.deadline = DeadlineIn(clock_.WallNow(), cfg_.default_window);  // GCP gives no time: 30 s from the flip
  ++sub.transitions;
  n.id = "gcp-" + n.kind + "-" + (sub.etag.empty() ? std::to_string(sub.transitions) : sub.etag);
  n.detail = sub.key + "=" + sub.value;
  return Emit(sub.key, n);
}

void GcpWatcher::Hidden(Subscription& sub) {
  if (!hidden_warned_) {
    hidden_warned_ = true;
    Log(LogLevel::kWarning,
        "event=watcher_blind provider=gcp key=" + Quote(sub.key) +
            " status=404 endpoint=" + Quote(sub.client.endpoint().url) +
            " cause=\"the metadata server hides instance/preempted: GKE Workload Identity (the GKE metadata server) "
            "conceals it from pods\" detail=\"no preemption notice from metadata; spotvisor goes on with SIGTERM "
            "alone (the kubelet's stop). To see notices run the pod with hostNetwork: true, or set provider.kind: "
            "none\"");
  } else {
    Log(LogLevel::kInfo, "event=watcher_key_hidden provider=gcp key=" + Quote(sub.key) + " status=404");
  }
}

void GcpWatcher::Retry(Subscription& sub, Duration delay) {
  if (stopped()) return;
  sub.timer->After(std::max(delay, Duration{0}), [this, &sub] { Request(sub); });
}

}  // namespace spotvisor::preemption

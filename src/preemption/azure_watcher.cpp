// Azure Scheduled Events loop. Events for other VMs of the availability set or scale set
// appear in the same document and are ignored; an acknowledgement releases an event for
// every listed resource, so only an event naming this VM alone is acknowledged.
#include "azure_watcher.hpp"

#include <algorithm>
#include <cctype>

#include "spotvisor/log/log.hpp"
#include "spotvisor/util/text.hpp"

namespace spotvisor::preemption {

using log::Log;
using log::LogLevel;
using log::Quote;
namespace {

constexpr const char* kEventsPath = "/metadata/scheduledevents?api-version=2020-07-01";
constexpr const char* kNamePath = "/metadata/instance/compute/name?api-version=2021-02-01&format=text";

bool SameText(std::string_view a, std::string_view b) {
  return a.size() == b.size() && std::equal(a.begin(), a.end(), b.begin(), [](char x, char y) {
           return std::tolower(static_cast<unsigned char>(x)) == std::tolower(static_cast<unsigned char>(y));
         });
}

std::string JsonString(std::string_view s) {  // EventIds are GUIDs; escape anyway
  std::string out = "\"";
  for (const char c : s) {
    if (c == '"' || c == '\\') out.push_back('\\');
    if (static_cast<unsigned char>(c) >= 0x20) out.push_back(c);
  }
  return out + "\"";
}

}  // namespace

AzureWatcher::AzureWatcher(boost::asio::io_context& io, Clock& clock, http::Endpoint endpoint,
                           const config::ProviderSection& cfg, const WatcherTuning& tuning)
    : clock_(clock),
      client_(io, endpoint),
      ack_client_(io, endpoint),
      timer_(clock.MakeTimer(io)),
      cfg_(cfg),
      tuning_(tuning),
      interval_(std::max(cfg.poll_interval, tuning.azure_min_interval)),
      backoff_(interval_, ErrorBackoffCeiling(cfg, tuning, interval_)),
      name_condition_(clock, "azure", "instance/compute/name"),
      events_condition_(clock, "azure", "scheduledevents"),
      vm_name_(cfg.azure_vm_name) {}

void AzureWatcher::OnStart() {
  Log(LogLevel::kInfo, "event=watcher_start provider=azure endpoint=" + Quote(client_.endpoint().url) +
                           " poll_interval_ms=" + std::to_string(interval_.count()) +
                           " backoff_max_ms=" + std::to_string(backoff_.max().count()) +
                           " vm_name=" + Quote(vm_name_.empty() ? "(from instance metadata)" : vm_name_));
  if (vm_name_.empty()) {
    FetchVmName();
  } else {
    Poll();
  }
}

void AzureWatcher::OnStop() {
  client_.Cancel();
  ack_client_.Cancel();
  timer_->Cancel();
  ack_queue_.clear();
}

void AzureWatcher::Schedule(Duration delay, void (AzureWatcher::*step)()) {
  if (stopped()) return;
  timer_->After(std::max(delay, Duration{0}), [this, step] { (this->*step)(); });
}

void AzureWatcher::FetchVmName() {
  http::HttpRequest request;
  request.target = kNamePath;
  request.headers.push_back({"Metadata", "true"});
  request.timeout = cfg_.request_timeout;
  client_.Send(std::move(request), [this](http::HttpOutcome outcome) {
    const std::string name(outcome.ok() ? TrimSpace(outcome.response.body) : "");
    const bool plausible = !name.empty() && name.size() <= 128 && std::all_of(name.begin(), name.end(), [](char c) {
      return std::isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '_' || c == '.';
    });
    if (!outcome.ok() || outcome.response.status != 200 || !plausible) {
      name_condition_.Bad(ConditionKey(outcome),
                          outcome.ok() && outcome.response.status == 200
                              ? "the VM name is not a name: '" + OneLine(name.substr(0, 80)) + "'"
                              : Describe(outcome));
      Schedule(backoff_.Next(), &AzureWatcher::FetchVmName);
      return;
    }
    name_condition_.Good();
    backoff_.Reset();
    vm_name_ = name;
    Log(LogLevel::kInfo, "event=azure_vm_name name=" + Quote(vm_name_));
    Poll();
  });
}

void AzureWatcher::Poll() {
  poll_start_ = clock_.Now();
  http::HttpRequest request;
  request.target = kEventsPath;
  request.headers.push_back({"Metadata", "true"});
  // Scheduled Events is switched on by the first call, which may take up to two minutes.
  request.timeout =
      answered_once_ ? cfg_.request_timeout : std::max(cfg_.request_timeout, tuning_.azure_first_call_timeout);
  client_.Send(std::move(request), [this](http::HttpOutcome outcome) { OnEvents(std::move(outcome)); });
}

void AzureWatcher::OnEvents(http::HttpOutcome outcome) {
  if (!outcome.ok() || outcome.response.status != 200) {
    const bool throttled = outcome.ok() && outcome.response.status == 429;
    events_condition_.Bad(throttled ? "throttled" : ConditionKey(outcome),
                          throttled ? "429: over the IMDS limit of 5 requests/s; backing off" : Describe(outcome));
    Schedule(backoff_.Next(), &AzureWatcher::Poll);
    return;
  }
  auto doc = ParseAzureScheduledEvents(outcome.response.body);
  if (!doc) {
    events_condition_.Bad("garbage", doc.error().message);
    Schedule(backoff_.Next(), &AzureWatcher::Poll);
    return;
  }
  events_condition_.Good();
  answered_once_ = true;
  backoff_.Reset();
  std::set<std::string> present;
  for (const AzureEvent& event : doc->events) {
    if (!Matches(event)) continue;
    present.insert(event.id);
    resources_[event.id] = event.resources;
    if (active_ids_.insert(event.id).second && !Emit("event:" + event.id, ToNotice(event))) return;
  }
  for (auto it = active_ids_.begin(); it != active_ids_.end();) {
    if (present.count(*it) != 0) {
      ++it;
      continue;
    }
    const std::string gone = *it;
    it = active_ids_.erase(it);
    resources_.erase(gone);
    if (!EmitAbsent("event:" + gone)) return;
  }
  const auto next = poll_start_ + interval_;
  Schedule(std::chrono::duration_cast<Duration>(next - clock_.Now()), &AzureWatcher::Poll);
}

bool AzureWatcher::Matches(const AzureEvent& event) const {
  if (!event.resource_type.empty() && event.resource_type != "VirtualMachine") return false;
  const bool type_ok = std::any_of(cfg_.azure_event_types.begin(), cfg_.azure_event_types.end(),
                                   [&](const std::string& t) { return SameText(t, event.type); });
  if (!type_ok) return false;
  return std::any_of(event.resources.begin(), event.resources.end(),
                     [&](const std::string& r) { return SameText(r, vm_name_); });
}

Notice AzureWatcher::ToNotice(const AzureEvent& event) const {
  Notice n;
  n.provider = "azure";
  n.kind = AsciiLower(event.type);
  n.action = NoticeAction::kStop;
  n.id = event.id;
  if (event.not_before) {
    n.deadline = *event.not_before;
  } else {
    // Empty once the event has started; unparsable is logged. Either way: the default window.
    if (!event.not_before_text.empty()) {
      Log(LogLevel::kWarning, "event=azure_bad_not_before id=" + Quote(event.id) +
                                  " not_before=" + Quote(OneLine(event.not_before_text)) +
                                  " using_window_ms=" + std::to_string(cfg_.default_window.count()));
    }
    n.deadline = DeadlineIn(clock_.WallNow(), cfg_.default_window);
  }
  std::string resources;
  for (const auto& r : event.resources) resources += (resources.empty() ? "" : ",") + r;
  n.detail = "EventType=" + event.type + " EventStatus=" + event.status + " NotBefore='" + event.not_before_text +
             "' Resources=" + resources;
  return n;
}

void AzureWatcher::Acknowledge(const Notice& notice) {
  if (!cfg_.azure_acknowledge || notice.provider != "azure" || stopped()) return;
  const auto it = resources_.find(notice.id);
  if (it != resources_.end() && !(it->second.size() == 1 && SameText(it->second[0], vm_name_))) {
    Log(LogLevel::kWarning,
        "event=azure_ack_skipped id=" + Quote(notice.id) +
            " reason=\"the event also names other VMs; acknowledging would release it for them too\"");
    return;
  }
  ack_queue_.push_back(notice.id);
  if (!ack_client_.Busy()) SendNextAck();
}

void AzureWatcher::SendNextAck() {
  if (ack_queue_.empty()) return;
  const std::string id = ack_queue_.front();
  ack_queue_.pop_front();
  http::HttpRequest request;
  request.method = "POST";
  request.target = kEventsPath;
  request.headers.push_back({"Metadata", "true"});
  request.headers.push_back({"Content-Type", "application/json"});
  request.body = "{\"StartRequests\": [{\"EventId\": " + JsonString(id) + "}]}";
  request.timeout = cfg_.request_timeout;
  ack_client_.Send(std::move(request), [this, id](http::HttpOutcome outcome) {
    if (outcome.ok() && outcome.response.status == 200) {
      Log(LogLevel::kInfo, "event=azure_ack id=" + Quote(id) + " status=200");
    } else {
      Log(LogLevel::kWarning, "event=azure_ack_failed id=" + Quote(id) + " message=" + Quote(Describe(outcome)));
    }
    SendNextAck();
  });
}

}  // namespace spotvisor::preemption

// The Azure IMDS fake: `Metadata: true` and an api-version required, X-Forwarded-For
// refused, 5 requests/s (429 beyond), Scheduled Events with DocumentIncarnation, events
// for other VMs of the set, RFC 1123 NotBefore, acknowledgement via StartRequests (the
// event then shows Started with an empty NotBefore), and the instance name.
#include <deque>
#include <nlohmann/json.hpp>

#include "mock_service.hpp"
#include "spotvisor/preemption/time_format.hpp"

namespace spotvisor::mock {
namespace {

using nlohmann::json;
using SteadyClock = std::chrono::steady_clock;

constexpr const char* kOtherVm = "spotvisor-mock-other-vm";

MockReply JsonReply(int status, const json& doc) {
  return TextReply(status, doc.dump(), "application/json; charset=utf-8");
}

MockReply BadRequest(const std::string& why) { return JsonReply(400, json{{"error", "Bad request. " + why}}); }

struct Event {
  std::string id;
  std::string type;
  std::string resource;
  std::chrono::system_clock::time_point not_before;
  bool started = false;
};

class AzureMockService final : public MockService {
 public:
  explicit AzureMockService(const MockOptions& options) : options_(options) {}

  MockReply Handle(MockRequest& request) override {
    if (request.Header("x-forwarded-for") != nullptr) {
      return BadRequest("Requests with X-Forwarded-For are not allowed.");
    }
    if (Throttled()) return JsonReply(429, json{{"error", "Too many requests"}});
    const std::string* metadata = request.Header("metadata");
    if (metadata == nullptr || (*metadata != "true" && *metadata != "True")) {
      return BadRequest("Required metadata header not specified");
    }
    if (request.Query("api-version") == nullptr) {
      return JsonReply(400, json{{"error",
                                  "Bad request. api-version was not specified in the "
                                  "request. For more information refer to aka.ms/azureimds"},
                                 {"newest-versions", {"2023-07-01", "2021-02-01", "2020-07-01"}}});
    }
    const std::string path = StripSlash(request.path);
    if (path == "/metadata/scheduledevents") {
      if (request.method == "GET") return Document();
      if (request.method == "POST") return Acknowledge(request.body);
      return JsonReply(405, json{{"error", "Method not allowed"}});
    }
    if (request.method != "GET") return JsonReply(405, json{{"error", "Method not allowed"}});
    if (path == "/metadata/instance/compute/name") return TextReply(200, options_.vm_name);
    if (path == "/metadata/instance/compute/vmSize") return TextReply(200, "Standard_NC6s_v3");
    if (path == "/metadata/instance/compute/location") return TextReply(200, "eastus");
    if (path == "/metadata/instance/compute/zone") return TextReply(200, "1");
    if (path == "/metadata/instance/compute") return JsonReply(200, Compute());
    if (path == "/metadata/instance") {
      return JsonReply(200, json{{"compute", Compute()}, {"network", {{"interface", json::array()}}}});
    }
    return JsonReply(404, json{{"error", "Not found"}});
  }

  void Preempt(const PreemptSpec& spec) override {
    events_.clear();
    const auto not_before = std::chrono::system_clock::now() + spec.deadline_in.value_or(std::chrono::seconds(30));
    if (!spec.other_vm_only) {
      events_.push_back({RandomGuid(), spec.event_type, options_.vm_name, not_before, false});
    }
    if (spec.other_vm_only || options_.other_vm_events) {
      events_.push_back({RandomGuid(), "Preempt", kOtherVm, not_before, false});
    }
    preempted_ = true;
    ++incarnation_;
  }

  void Clear() override {
    if (events_.empty() && !preempted_) return;
    events_.clear();
    preempted_ = false;
    ++incarnation_;
  }

  bool preempted() const override { return preempted_; }
  std::vector<std::string> acknowledged() const override { return acknowledged_; }

 private:
  bool Throttled() {
    if (options_.azure_rate_limit <= 0) return false;
    const auto now = SteadyClock::now();
    while (!recent_.empty() && now - recent_.front() >= std::chrono::seconds(1)) recent_.pop_front();
    if (recent_.size() >= static_cast<std::size_t>(options_.azure_rate_limit)) return true;
    recent_.push_back(now);
    return false;
  }

  MockReply Document() const {
    json events = json::array();
    for (const Event& e : events_) {
      events.push_back({{"EventId", e.id},
                        {"EventStatus", e.started ? "Started" : "Scheduled"},
                        {"EventType", e.type},
                        {"ResourceType", "VirtualMachine"},
                        {"Resources", {e.resource}},
                        {"NotBefore", e.started ? "" : preemption::FormatRfc1123(e.not_before)},
                        {"Description", ""},
                        {"EventSource", "Platform"},
                        {"DurationInSeconds", -1}});
    }
    return JsonReply(200, json{{"DocumentIncarnation", incarnation_}, {"Events", events}});
  }

  MockReply Acknowledge(const std::string& body) {
    const json doc = json::parse(body, nullptr, /*allow_exceptions=*/false);
    if (doc.is_discarded() || !doc.is_object() || !doc.contains("StartRequests") || !doc["StartRequests"].is_array()) {
      return BadRequest("Expected {\"StartRequests\": [{\"EventId\": ...}]}");
    }
    std::vector<Event*> targets;
    for (const auto& item : doc["StartRequests"]) {
      if (!item.is_object() || !item.contains("EventId") || !item["EventId"].is_string()) {
        return BadRequest("Expected an EventId string");
      }
      const std::string id = item["EventId"].get<std::string>();
      Event* found = nullptr;
      for (Event& e : events_) found = e.id == id ? &e : found;
      if (found == nullptr) return BadRequest("Unknown EventId " + id);
      targets.push_back(found);
    }
    for (Event* e : targets) {
      if (!e->started) ++incarnation_;
      e->started = true;
      acknowledged_.push_back(e->id);
    }
    return TextReply(200, "", "application/json; charset=utf-8");
  }

  json Compute() const {
    return json{{"name", options_.vm_name},
                {"vmSize", "Standard_NC6s_v3"},
                {"location", "eastus"},
                {"zone", "1"},
                {"priority", "Spot"},
                {"evictionPolicy", "Deallocate"},
                {"vmId", "02aab8a4-74ef-476e-8182-f6d2ba4166a6"}};
  }

  MockOptions options_;           // vm name, other-VM events, rate limit
  std::vector<Event> events_;     // the current document's events
  std::int64_t incarnation_ = 1;  // DocumentIncarnation
  bool preempted_ = false;
  std::vector<std::string> acknowledged_;       // EventIds acknowledged
  std::deque<SteadyClock::time_point> recent_;  // request times within the last second
};

}  // namespace

std::unique_ptr<MockService> MakeAzureMockService(const MockOptions& options) {
  return std::make_unique<AzureMockService>(options);
}

}  // namespace spotvisor::mock

// Response-body parsers for the watchers. nlohmann-json in no-throw mode; every field is
// type-checked before use, so a hostile or truncated body is an Error, never a crash.
#include "spotvisor/preemption/notice_parsers.hpp"

#include <cctype>
#include <cmath>
#include <nlohmann/json.hpp>

namespace spotvisor::preemption {
namespace {

using nlohmann::json;

std::string Excerpt(std::string_view body) {
  std::string out;
  for (const char c : body.substr(0, 80)) {
    out.push_back(std::isprint(static_cast<unsigned char>(c)) ? c : '?');
  }
  return out;
}

// Parses `body` as one JSON object; discarded (not an object) on any failure.
Result<json> ParseObject(std::string_view what, std::string_view body) {
  json doc = json::parse(body.begin(), body.end(), nullptr, /*allow_exceptions=*/false);
  if (doc.is_discarded() || !doc.is_object()) {
    return Error{std::string(what) + ": not a JSON object: '" + Excerpt(body) + "'"};
  }
  return doc;
}

// The string member `key`, or nullptr when absent or of another type.
const std::string* StringMember(const json& object, const char* key) {
  const auto it = object.find(key);
  if (it == object.end() || !it->is_string()) return nullptr;
  return it->get_ptr<const std::string*>();
}

Result<AzureEvent> ParseAzureEvent(const json& item) {
  if (!item.is_object()) return Error{"azure scheduled events: an event is not an object"};
  AzureEvent event;
  const std::string* id = StringMember(item, "EventId");
  if (id == nullptr || id->empty()) return Error{"azure scheduled events: an event has no EventId"};
  event.id = *id;
  if (const auto* s = StringMember(item, "EventType")) event.type = *s;
  if (const auto* s = StringMember(item, "EventStatus")) event.status = *s;
  if (const auto* s = StringMember(item, "ResourceType")) event.resource_type = *s;
  if (const auto* s = StringMember(item, "NotBefore")) {
    event.not_before_text = std::string(TrimSpace(*s));
    if (!event.not_before_text.empty()) {
      auto parsed = ParseRfc1123(event.not_before_text);
      if (parsed) event.not_before = *parsed;
    }
  }
  const auto resources = item.find("Resources");
  if (resources != item.end() && resources->is_array()) {
    for (const auto& r : *resources) {
      if (r.is_string()) event.resources.push_back(r.get<std::string>());
    }
  }
  const auto duration = item.find("DurationInSeconds");
  if (duration != item.end() && duration->is_number_integer()) {
    event.duration_s = duration->get<std::int64_t>();
  }
  return event;
}

}  // namespace

std::string_view TrimSpace(std::string_view s) {
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.front()))) s.remove_prefix(1);
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.back()))) s.remove_suffix(1);
  return s;
}

Result<AwsInstanceAction> ParseAwsInstanceAction(std::string_view body) {
  auto doc = ParseObject("aws instance-action", body);
  if (!doc) return doc.error();
  const std::string* action = StringMember(*doc, "action");
  if (action == nullptr) {
    return Error{"aws instance-action: expected a string member 'action': '" + Excerpt(body) + "'"};
  }
  if (*action != "terminate" && *action != "stop" && *action != "hibernate") {
    return Error{"aws instance-action: unknown action '" + Excerpt(*action) + "'"};
  }
  AwsInstanceAction out{*action, std::nullopt, ""};
  if (const std::string* time = StringMember(*doc, "time")) {
    auto when = ParseIso8601(*time);
    if (when) {
      out.time = *when;
    } else {
      out.time_error = when.error().message;
    }
  } else {
    out.time_error = "no string member 'time'";
  }
  return out;
}

Result<TimePoint> ParseAwsRebalance(std::string_view body) {
  auto doc = ParseObject("aws rebalance recommendation", body);
  if (!doc) return doc.error();
  const std::string* time = StringMember(*doc, "noticeTime");
  if (time == nullptr) {
    return Error{"aws rebalance recommendation: no string 'noticeTime': '" + Excerpt(body) + "'"};
  }
  auto when = ParseIso8601(*time);
  if (!when) return Error{"aws rebalance recommendation: " + when.error().message};
  return *when;
}

Result<AzureDocument> ParseAzureScheduledEvents(std::string_view body) {
  auto doc = ParseObject("azure scheduled events", body);
  if (!doc) return doc.error();
  AzureDocument out;
  const auto incarnation = doc->find("DocumentIncarnation");
  if (incarnation != doc->end() && incarnation->is_number_integer()) {
    out.incarnation = incarnation->get<std::int64_t>();
  }
  const auto events = doc->find("Events");
  if (events == doc->end() || !events->is_array()) {
    return Error{"azure scheduled events: no 'Events' array: '" + Excerpt(body) + "'"};
  }
  for (const auto& item : *events) {
    auto event = ParseAzureEvent(item);
    if (!event) return event.error();
    out.events.push_back(std::move(*event));
  }
  return out;
}

Result<TimePoint> ParseAlibabaTerminationTime(std::string_view body) {
  auto when = ParseIso8601(TrimSpace(body));
  if (!when) return Error{"alibaba termination-time: " + when.error().message};
  return *when;
}

Result<FileNoticeContent> ParseFileNotice(std::string_view content) {
  auto doc = ParseObject("notice file", content);
  if (!doc) return doc.error();
  FileNoticeContent out;
  const auto deadline = doc->find("deadline");
  if (deadline != doc->end()) {
    if (deadline->is_string()) {
      auto when = ParseIso8601(deadline->get<std::string>());
      if (!when) return Error{"notice file: deadline: " + when.error().message};
      out.deadline = *when;
    } else if (deadline->is_number()) {
      const double secs = deadline->get<double>();
      // Unix seconds between 2000 and 2200: anything else is a mistake, not a deadline.
      if (!std::isfinite(secs) || secs < 946684800.0 || secs > 7258118400.0) {
        return Error{"notice file: deadline is not a plausible Unix time"};
      }
      out.deadline = TimePoint{std::chrono::duration_cast<TimePoint::duration>(std::chrono::duration<double>(secs))};
    } else {
      return Error{"notice file: deadline must be an ISO-8601 string or Unix seconds"};
    }
  }
  if (const auto* kind = StringMember(*doc, "kind")) out.kind = *kind;
  if (const auto* action = StringMember(*doc, "action")) {
    if (*action == "stop") {
      out.action = NoticeAction::kStop;
    } else if (*action == "checkpoint") {
      out.action = NoticeAction::kCheckpoint;
    } else {
      return Error{"notice file: action must be 'stop' or 'checkpoint'"};
    }
  }
  return out;
}

}  // namespace spotvisor::preemption

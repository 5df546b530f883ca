// Pure parsers of metadata-service response bodies: AWS instance-action and rebalance
// JSON, Azure Scheduled Events JSON, Alibaba termination-time text, and the optional JSON
// content of a trigger file. Any thread; never throw; every one has a libFuzzer harness.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "spotvisor/preemption/time_format.hpp"
#include "spotvisor/preemption/watcher.hpp"
#include "spotvisor/util/result.hpp"

namespace spotvisor::preemption {

// AWS `spot/instance-action`: {"action": "terminate"|"stop"|"hibernate", "time": ISO-8601}.
// The action decides: a notice whose time is missing or unreadable is still a notice (its
// deadline unknown, `time_error` says why), never dropped as garbage.
struct AwsInstanceAction {
  std::string action;             // one of the three documented actions
  std::optional<TimePoint> time;  // approximate, cloud clock
  std::string time_error;         // why `time` is unset
};
Result<AwsInstanceAction> ParseAwsInstanceAction(std::string_view body);

// AWS `events/recommendations/rebalance`: {"noticeTime": ISO-8601}.
Result<TimePoint> ParseAwsRebalance(std::string_view body);

// One entry of Azure's `Events` array.
struct AzureEvent {
  std::string id;                       // EventId (non-empty)
  std::string type;                     // EventType: Freeze, Reboot, Redeploy, Preempt, Terminate
  std::string status;                   // EventStatus: Scheduled, Started
  std::string resource_type;            // ResourceType, normally VirtualMachine
  std::vector<std::string> resources;   // Resources: VM names the event applies to
  std::string not_before_text;          // NotBefore as sent (RFC 1123; empty once Started)
  std::optional<TimePoint> not_before;  // parsed NotBefore, when it parses
  std::int64_t duration_s = -1;         // DurationInSeconds (-1 = unknown)
};

// Azure `/metadata/scheduledevents`: {"DocumentIncarnation": N, "Events": [...]}. A
// document with an event that has no EventId is rejected as a whole.
struct AzureDocument {
  std::int64_t incarnation = 0;
  std::vector<AzureEvent> events;
};
Result<AzureDocument> ParseAzureScheduledEvents(std::string_view body);

// Alibaba `instance/spot/termination-time`: plain ISO-8601 text.
Result<TimePoint> ParseAlibabaTerminationTime(std::string_view body);

// Optional JSON in a trigger file: {"deadline": ISO-8601 or Unix seconds, "kind": "...",
// "action": "stop"|"checkpoint"}; every key optional, unknown keys ignored.
struct FileNoticeContent {
  std::optional<TimePoint> deadline;
  std::optional<std::string> kind;
  std::optional<NoticeAction> action;
};
Result<FileNoticeContent> ParseFileNotice(std::string_view content);

// `s` without leading and trailing whitespace.
std::string_view TrimSpace(std::string_view s);

}  // namespace spotvisor::preemption

// AWS and Alibaba notices. AWS gives no event id, so the id is built from the content
// (action + time): the same notice seen by many polls is one notice.
#include "imds_dialects.hpp"

#include "spotvisor/preemption/notice_parsers.hpp"

namespace spotvisor::preemption {

ImdsDialect AwsDialect(const config::ProviderSection& cfg) {
  ImdsDialect d;
  d.provider = "aws";
  d.token_path = "/latest/api/token";
  d.ttl_header = "X-aws-ec2-metadata-token-ttl-seconds";
  d.token_header = "X-aws-ec2-metadata-token";
  d.probes.push_back({"instance-action", "/latest/meta-data/spot/instance-action",
                      [](std::string_view body, WallTime) -> Result<Notice> {
                        auto parsed = ParseAwsInstanceAction(body);
                        if (!parsed) return parsed.error();
                        Notice n;
                        n.provider = "aws";
                        n.kind = parsed->action;
                        n.action = NoticeAction::kStop;
                        n.deadline = parsed->time;
                        n.id = "aws-itn-" + parsed->action + "-" +
                               (parsed->time ? FormatIso8601(*parsed->time) : "unknown-time");
                        n.detail = OneLine(body);
                        if (!parsed->time) n.detail += " (deadline unknown: " + parsed->time_error + ")";
                        return n;
                      }});
  if (cfg.rebalance != config::RebalanceAction::kIgnore) {
    const NoticeAction action =
        cfg.rebalance == config::RebalanceAction::kStop ? NoticeAction::kStop : NoticeAction::kCheckpoint;
    const Duration window = cfg.default_window;
    d.probes.push_back({"rebalance", "/latest/meta-data/events/recommendations/rebalance",
                        [action, window](std::string_view body, WallTime now) -> Result<Notice> {
                          auto parsed = ParseAwsRebalance(body);
                          if (!parsed) return parsed.error();
                          Notice n;
                          n.provider = "aws";
                          n.kind = "rebalance";
                          n.action = action;
                          n.deadline = DeadlineIn(now, window);  // AWS promises no time
                          n.id = "aws-rebalance-" + FormatIso8601(*parsed);
                          n.detail = OneLine(body);
                          return n;
                        }});
  }
  return d;
}

ImdsDialect AlibabaDialect(const config::ProviderSection&) {
  ImdsDialect d;
  d.provider = "alibaba";
  d.token_path = "/latest/api/token";
  d.ttl_header = "X-aliyun-ecs-metadata-token-ttl-seconds";
  d.token_header = "X-aliyun-ecs-metadata-token";
  d.probes.push_back({"termination-time", "/latest/meta-data/instance/spot/termination-time",
                      [](std::string_view body, WallTime) -> Result<Notice> {
                        auto parsed = ParseAlibabaTerminationTime(body);
                        if (!parsed) return parsed.error();
                        Notice n;
                        n.provider = "alibaba";
                        n.kind = "terminate";
                        n.action = NoticeAction::kStop;
                        n.deadline = *parsed;
                        n.id = "alibaba-terminate-" + FormatIso8601(*parsed);
                        n.detail = OneLine(body);
                        return n;
                      }});
  return d;
}

}  // namespace spotvisor::preemption

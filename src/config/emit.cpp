// The effective configuration as YAML (`--print-config`). Environment values whose names
// look secret are redacted; token files are shown by path, never by content.
#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <cctype>

#include "spotvisor/config/loader.hpp"
#include "spotvisor/config/signals.hpp"

namespace spotvisor::config {

const char* ToString(ProviderKind kind) {
  switch (kind) {
    case ProviderKind::kAuto:
      return "auto";
    case ProviderKind::kAws:
      return "aws";
    case ProviderKind::kGcp:
      return "gcp";
    case ProviderKind::kAzure:
      return "azure";
    case ProviderKind::kAlibaba:
      return "alibaba";
    case ProviderKind::kFile:
      return "file";
    case ProviderKind::kNone:
      return "none";
  }
  return "none";
}

const char* ToString(SignalTarget target) {
  switch (target) {
    case SignalTarget::kAuto:
      return "auto";
    case SignalTarget::kGroup:
      return "group";
    case SignalTarget::kMain:
      return "main";
    case SignalTarget::kWorkers:
      return "workers";
  }
  return "auto";
}
namespace {

bool LooksSecret(std::string name) {
  std::transform(name.begin(), name.end(), name.begin(), [](unsigned char c) { return std::toupper(c); });
  for (const char* word : {"TOKEN", "SECRET", "PASSWORD", "PASSWD", "KEY", "CREDENTIAL", "AUTH"}) {
    if (name.find(word) != std::string::npos) return true;
  }
  return false;
}

std::string OptPath(const std::optional<std::filesystem::path>& p) { return p ? p->string() : ""; }

// An optional value: the key and its value, or, when not set, a comment naming it (a key
// with no value, `~`, is an error when read back: it never silently means the default).
void Optional(YAML::Emitter& y, const char* key, const char* full_key, const std::string& value) {
  if (value.empty()) {
    y << YAML::Newline << YAML::Comment(std::string(full_key) + ": not set");
  } else {
    y << YAML::Key << key << YAML::Value << value;
  }
}

template <class E>
std::string Name(E value, std::initializer_list<std::pair<E, const char*>> names) {
  for (const auto& [v, n] : names) {
    if (v == value) return n;
  }
  return "?";
}

// A cost value as the job file spells it: a number, [low, high] or unknown.
void CostOut(YAML::Emitter& y, const CostValue& v) {
  if (!v.known) {
    y << "unknown";
  } else if (v.low == v.high) {
    y << v.low;
  } else {
    y << YAML::Flow << YAML::BeginSeq << v.low << v.high << YAML::EndSeq;
  }
}

void EmitCost(YAML::Emitter& y, const CostSection& c) {
  if (!c.configured) {
    y << YAML::Newline << YAML::Comment("cost: not set (no prices: costs are unknown)");
    return;
  }
  y << YAML::Key << "cost" << YAML::Value;
  y.SetDoublePrecision(15);  // prices print as written (0.08, not 0.080000000000000002)
  y << YAML::BeginMap;
  y << YAML::Key << "currency" << YAML::Value << c.currency;
  for (const auto& f : kCostFields) {
    y << YAML::Key << f.key << YAML::Value;
    CostOut(y, c.*f.value);
  }
  y << YAML::Key << "gpus" << YAML::Value << c.gpus;
  y << YAML::Key << "billing_minimum" << YAML::Value << FormatDuration(c.billing_minimum);
  y << YAML::Key << "billing_from" << YAML::Value << (c.bill_from_boot ? "boot" : "start");
  y << YAML::Key << "other_hour" << YAML::Value << YAML::BeginMap;
  for (const auto& [name, value] : c.other_hour) {
    y << YAML::Key << name << YAML::Value;
    CostOut(y, value);
  }
  y << YAML::EndMap;
  y << YAML::Key << "unknown" << YAML::Value << YAML::Flow << c.unknown;
  y << YAML::Key << "budget" << YAML::Value << c.budget;
  y << YAML::Key << "warn_fraction" << YAML::Value << c.warn_fraction;
  y << YAML::Key << "check_interval" << YAML::Value << FormatDuration(c.check_interval);
  y << YAML::EndMap;
}

void EmitHooks(YAML::Emitter& y, const HooksSection& h) {
  y << YAML::Key << "hooks" << YAML::Value << YAML::BeginMap;
  const std::pair<const char*, const HookSpec*> hooks[] = {{"before_start", &h.before_start},
                                                           {"on_checkpoint", &h.on_checkpoint},
                                                           {"on_notice", &h.on_notice},
                                                           {"on_finish", &h.on_finish}};
  for (const auto& [name, spec] : hooks) {
    if (spec->command.empty()) continue;  // an unset hook has no spelling but absence
    y << YAML::Key << name << YAML::Value << YAML::BeginMap;
    y << YAML::Key << "command" << YAML::Value << YAML::Flow << spec->command;
    y << YAML::Key << "timeout" << YAML::Value << FormatDuration(spec->timeout);
    y << YAML::EndMap;
  }
  y << YAML::EndMap;
}

}  // namespace

std::string ToYaml(const JobConfig& c) {
  YAML::Emitter y;
  y << YAML::BeginMap;
  y << YAML::Key << "job" << YAML::Value << YAML::BeginMap;
  y << YAML::Key << "name" << YAML::Value << c.job.name;
  y << YAML::Key << "command" << YAML::Value << YAML::Flow << c.job.command;
  y << YAML::Key << "resume_args" << YAML::Value << YAML::Flow << c.job.resume_args;
  y << YAML::Key << "workdir" << YAML::Value << c.job.workdir.string();
  y << YAML::Key << "env" << YAML::Value << YAML::BeginMap;
  for (const auto& [k, v] : c.job.env) y << YAML::Key << k << YAML::Value << (LooksSecret(k) ? "<redacted>" : v);
  y << YAML::EndMap;
  y << YAML::Key << "success_exit_codes" << YAML::Value << YAML::Flow << c.job.success_exit_codes;
  y << YAML::Key << "stop_exit_code" << YAML::Value << c.job.stop_exit_code;
  Optional(y, "result_file", "job.result_file", OptPath(c.job.result_file));
  y << YAML::Key << "labels" << YAML::Value << YAML::BeginMap;
  for (const auto& [k, v] : c.job.labels) y << YAML::Key << k << YAML::Value << v;
  y << YAML::EndMap;
  y << YAML::EndMap;

  const auto& p = c.provider;
  y << YAML::Key << "provider" << YAML::Value << YAML::BeginMap;
  if (p.detected_from.empty()) {
    y << YAML::Key << "kind" << YAML::Value << ToString(p.kind);
  } else {
    y << YAML::Key << "kind" << YAML::Value << "auto";
    y << YAML::Comment("found: " + std::string(ToString(p.kind)) + " (" + p.detected_from + ")");
  }
  Optional(y, "endpoint", "provider.endpoint", p.endpoint);
  y << YAML::Key << "poll_interval" << YAML::Value << FormatDuration(p.poll_interval);
  y << YAML::Key << "request_timeout" << YAML::Value << FormatDuration(p.request_timeout);
  y << YAML::Key << "safety_margin" << YAML::Value << FormatDuration(p.safety_margin);
  y << YAML::Key << "default_window" << YAML::Value << FormatDuration(p.default_window);
  y << YAML::Key << "min_grace" << YAML::Value << FormatDuration(p.min_grace);
  y << YAML::Key << "rebalance" << YAML::Value
    << Name(p.rebalance, {{RebalanceAction::kIgnore, "ignore"},
                          {RebalanceAction::kCheckpoint, "checkpoint"},
                          {RebalanceAction::kStop, "stop"}});
  y << YAML::Key << "token_ttl" << YAML::Value << FormatDuration(p.token_ttl);
  y << YAML::Key << "imdsv1_fallback" << YAML::Value << p.imdsv1_fallback;
  y << YAML::Key << "azure_vm_name" << YAML::Value << p.azure_vm_name;
  y << YAML::Key << "azure_event_types" << YAML::Value << YAML::Flow << p.azure_event_types;
  y << YAML::Key << "azure_acknowledge" << YAML::Value << p.azure_acknowledge;
  Optional(y, "file", "provider.file", p.file.string());
  y << YAML::Key << "dmi_root" << YAML::Value << p.dmi_root.string();
  y << YAML::Key << "resume_after" << YAML::Value << FormatDuration(p.resume_after);
  y << YAML::Key << "drained_timeout" << YAML::Value << FormatDuration(p.drained_timeout);
  y << YAML::EndMap;

  const auto& s = c.signals;
  y << YAML::Key << "signals" << YAML::Value << YAML::BeginMap;
  y << YAML::Key << "on_notice" << YAML::Value << SignalName(s.on_notice);
  y << YAML::Key << "checkpoint" << YAML::Value << SignalName(s.checkpoint);
  std::vector<std::string> stop_on;
  for (int signo : s.stop_on) stop_on.push_back(SignalName(signo));
  y << YAML::Key << "stop_on" << YAML::Value << YAML::Flow << stop_on;
  y << YAML::Key << "target" << YAML::Value << ToString(s.target);
  if (!s.target_why.empty()) {
    y << YAML::Comment(std::string("signals go to: ") + ToString(s.Recipients()) + " (" + s.target_why + ")");
  }
  y << YAML::Key << "grace" << YAML::Value << FormatDuration(s.grace);
  y << YAML::Key << "kill_timeout" << YAML::Value << FormatDuration(s.kill_timeout);
  y << YAML::Key << "defer_stop" << YAML::Value << (s.defer_stop ? "auto" : "never");
  y << YAML::EndMap;

  const auto& k = c.checkpoints;
  y << YAML::Key << "checkpoints" << YAML::Value << YAML::BeginMap;
  Optional(y, "dir", "checkpoints.dir", OptPath(k.dir));
  y << YAML::Key << "pattern" << YAML::Value << k.pattern;
  y << YAML::Key << "validate" << YAML::Value
    << Name(k.validate, {{ValidateLevel::kStructure, "structure"},
                         {ValidateLevel::kFormat, "format"},
                         {ValidateLevel::kFull, "full"}});
  y << YAML::Key << "content" << YAML::Value
    << Name(k.content, {{ContentCheck::kOff, "off"}, {ContentCheck::kFinite, "finite"}});
  y << YAML::Key << "format" << YAML::Value << k.format;
  y << YAML::Key << "marker" << YAML::Value << k.marker;
  y << YAML::Key << "keep" << YAML::Value << k.keep;
  y << YAML::Key << "quarantine" << YAML::Value << k.quarantine;
  y << YAML::Key << "latest_link" << YAML::Value << k.latest_link;
  y << YAML::Key << "rewrite_hints" << YAML::Value << k.rewrite_hints;
  if (k.processes != 0) {
    y << YAML::Key << "processes" << YAML::Value << k.processes;
  } else {
    y << YAML::Key << "processes" << YAML::Value << "auto";
  }
  if (!k.processes_why.empty()) y << YAML::Comment(k.processes_why);
  y << YAML::Key << "select_timeout" << YAML::Value << FormatDuration(k.select_timeout);
  y << YAML::Key << "mirror" << YAML::Value << YAML::BeginMap;
  Optional(y, "path", "checkpoints.mirror.path", OptPath(k.mirror.path));
  y << YAML::Key << "command" << YAML::Value << YAML::Flow << k.mirror.command;
  Optional(y, "remote", "checkpoints.mirror.remote", k.mirror.remote.value_or(""));
  y << YAML::Key << "rclone_flags" << YAML::Value << YAML::Flow << k.mirror.rclone_flags;
  y << YAML::Key << "keep" << YAML::Value << k.mirror.keep;
  y << YAML::Key << "restore_command" << YAML::Value << YAML::Flow << k.mirror.restore_command;
  y << YAML::Key << "prune_command" << YAML::Value << YAML::Flow << k.mirror.prune_command;
  y << YAML::Key << "bandwidth" << YAML::Value << std::to_string(k.mirror.bandwidth);
  y << YAML::Key << "concurrency" << YAML::Value << k.mirror.concurrency;
  y << YAML::Key << "timeout" << YAML::Value << FormatDuration(k.mirror.timeout);
  y << YAML::Key << "restore" << YAML::Value << k.mirror.restore;
  y << YAML::EndMap << YAML::EndMap;

  const auto& r = c.restart;
  y << YAML::Key << "restart" << YAML::Value << YAML::BeginMap;
  y << YAML::Key << "max_restarts" << YAML::Value << r.max_restarts;
  y << YAML::Key << "max_hangs" << YAML::Value << r.max_hangs;
  y << YAML::Key << "no_progress_limit" << YAML::Value << r.no_progress_limit;
  y << YAML::Key << "backoff" << YAML::Value << YAML::BeginMap;
  y << YAML::Key << "initial" << YAML::Value << FormatDuration(r.backoff.initial);
  y << YAML::Key << "max" << YAML::Value << FormatDuration(r.backoff.max);
  y << YAML::Key << "multiplier" << YAML::Value << r.backoff.multiplier;
  y << YAML::Key << "jitter" << YAML::Value << r.backoff.jitter;
  y << YAML::Key << "reset_after" << YAML::Value << FormatDuration(r.backoff.reset_after);
  y << YAML::EndMap;
  y << YAML::Key << "crash_loop" << YAML::Value << YAML::BeginMap;
  y << YAML::Key << "failures" << YAML::Value << r.crash_loop.failures;
  y << YAML::Key << "window" << YAML::Value << FormatDuration(r.crash_loop.window);
  y << YAML::EndMap << YAML::EndMap;

  const auto& cad = c.cadence;
  y << YAML::Key << "cadence" << YAML::Value << YAML::BeginMap;
  y << YAML::Key << "every" << YAML::Value
    << (cad.mode == CadenceMode::kOff        ? "off"
        : cad.mode == CadenceMode::kAdaptive ? "adaptive"
                                             : FormatDuration(cad.every));
  y << YAML::Key << "min" << YAML::Value << FormatDuration(cad.min);
  y << YAML::Key << "max" << YAML::Value << FormatDuration(cad.max);
  y << YAML::Key << "mtbi_prior" << YAML::Value << FormatDuration(cad.mtbi_prior);
  y << YAML::Key << "mtbi_priors" << YAML::Value << YAML::BeginMap;
  for (const auto& [provider, d] : cad.mtbi_priors) y << YAML::Key << provider << YAML::Value << FormatDuration(d);
  y << YAML::EndMap;
  y << YAML::EndMap;

  y << YAML::Key << "health" << YAML::Value << YAML::BeginMap;
  Optional(y, "heartbeat_file", "health.heartbeat_file", OptPath(c.health.heartbeat_file));
  y << YAML::Key << "progress_pattern" << YAML::Value << c.health.progress_pattern;
  y << YAML::Key << "hang_timeout" << YAML::Value << FormatDuration(c.health.hang_timeout);
  y << YAML::EndMap;

  const auto& t = c.telemetry;
  y << YAML::Key << "telemetry" << YAML::Value << YAML::BeginMap;
  y << YAML::Key << "state_dir" << YAML::Value << t.state_dir.string();
  y << YAML::Key << "metrics" << YAML::Value << YAML::BeginMap;
  y << YAML::Key << "listen" << YAML::Value << t.metrics.listen;
  Optional(y, "token_file", "telemetry.metrics.token_file", OptPath(t.metrics.token_file));
  y << YAML::EndMap;
  y << YAML::Key << "log_format" << YAML::Value << (t.log_format == LogFormat::kJson ? "json" : "text");
  y << YAML::Key << "log_level" << YAML::Value << t.log_level;
  Optional(y, "report_path", "telemetry.report_path", OptPath(t.report_path));
  y << YAML::Key << "fingerprint_files" << YAML::Value << YAML::Flow << YAML::BeginSeq;
  for (const auto& f : t.fingerprint_files) y << f.string();
  y << YAML::EndSeq;
  y << YAML::Key << "gpu_interval" << YAML::Value << FormatDuration(t.gpu_interval);
  Optional(y, "termination_log", "telemetry.termination_log", OptPath(t.termination_log));
  y << YAML::EndMap;
  EmitCost(y, c.cost);
  EmitHooks(y, c.hooks);
  y << YAML::Key << "slurm" << YAML::Value << YAML::BeginMap;
  std::vector<std::string> requeue_on;
  for (int signo : c.slurm.requeue_on) requeue_on.push_back(signo == kRequeueOnNotice ? "notice" : SignalName(signo));
  y << YAML::Key << "requeue_on" << YAML::Value << YAML::Flow << requeue_on;
  y << YAML::Key << "scontrol" << YAML::Value << c.slurm.scontrol;
  y << YAML::EndMap;
  const auto& g = c.coordination;
  y << YAML::Key << "coordination" << YAML::Value << YAML::BeginMap;
  y << YAML::Key << "etcd" << YAML::Value << YAML::Flow << g.etcd;
  y << YAML::Key << "nodes" << YAML::Value << g.nodes;
  y << YAML::Key << "node_rank" << YAML::Value;
  if (g.node_rank == kAutoRank) {
    y << "auto";
  } else {
    y << g.node_rank;
  }
  y << YAML::Key << "spares" << YAML::Value << g.spares;
  y << YAML::Key << "min_nodes" << YAML::Value << g.min_nodes;
  y << YAML::Key << "shrink_after" << YAML::Value << FormatDuration(g.shrink_after);
  y << YAML::Key << "grow_wait" << YAML::Value << FormatDuration(g.grow_wait);
  y << YAML::Key << "prefix" << YAML::Value << g.prefix;
  y << YAML::Key << "lease_ttl" << YAML::Value << FormatDuration(g.lease_ttl);
  y << YAML::Key << "join_timeout" << YAML::Value << FormatDuration(g.join_timeout);
  y << YAML::Key << "advertise" << YAML::Value << g.advertise;
  y << YAML::Key << "master_port" << YAML::Value << g.master_port;
  Optional(y, "credentials", "coordination.credentials", OptPath(g.credentials));
  if (g.tls.set()) {
    y << YAML::Key << "tls" << YAML::Value << YAML::BeginMap;
    Optional(y, "ca", "coordination.tls.ca (the system's trust store)", OptPath(g.tls.ca));
    Optional(y, "cert", "coordination.tls.cert", OptPath(g.tls.cert));
    Optional(y, "key", "coordination.tls.key", OptPath(g.tls.key));
    y << YAML::EndMap;
  } else {
    y << YAML::Newline << YAML::Comment("coordination.tls: not set (https members: the system's trust store)");
  }
  y << YAML::EndMap;
  y << YAML::EndMap;
  return std::string(y.c_str()) + "\n";
}

}  // namespace spotvisor::config

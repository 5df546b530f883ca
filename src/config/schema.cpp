// The job file schema: one table of keys per section, each key with its parser (the typed
// reads are NodeReader's). Unknown keys are errors (a typo must never silently disable a
// safety feature). A ConfigError carries the message to the loader, where it becomes an Error.
#include "schema.hpp"

#include <string>
#include <vector>

#include "node_reader.hpp"
#include "spotvisor/config/name_pattern.hpp"
#include "spotvisor/config/templates.hpp"

namespace spotvisor::config {
namespace {

// Reads one YAML document into a JobConfig, section by section. The tables are laid out by
// hand, one key per line, so clang-format leaves them alone.
// clang-format off
class Reader : public NodeReader {
 public:
  using NodeReader::NodeReader;

  void ReadDocument(const YAML::Node& root) {
    if (!root || root.IsNull()) return;  // an empty file is all defaults
    Map(root, "", {
        {"job", [&](const YAML::Node& n, const std::string& p) { ReadJob(n, p); }},
        {"provider", [&](const YAML::Node& n, const std::string& p) { ReadProvider(n, p); }},
        {"signals", [&](const YAML::Node& n, const std::string& p) { ReadSignals(n, p); }},
        {"checkpoints", [&](const YAML::Node& n, const std::string& p) { ReadCheckpoints(n, p); }},
        {"restart", [&](const YAML::Node& n, const std::string& p) { ReadRestart(n, p); }},
        {"cadence", [&](const YAML::Node& n, const std::string& p) { ReadCadence(n, p); }},
        {"health", [&](const YAML::Node& n, const std::string& p) { ReadHealth(n, p); }},
        {"telemetry", [&](const YAML::Node& n, const std::string& p) { ReadTelemetry(n, p); }},
        {"cost", [&](const YAML::Node& n, const std::string& p) { ReadCostSection(*this, n, p, job_.cost); }},
        {"hooks", [&](const YAML::Node& n, const std::string& p) { ReadHooks(n, p); }},
        {"slurm", [&](const YAML::Node& n, const std::string& p) { ReadSlurm(n, p); }},
        {"coordination", [&](const YAML::Node& n, const std::string& p) { ReadCoordination(n, p); }},
    });
  }

 private:

  void ReadJob(const YAML::Node& node, const std::string& p) {
    auto& j = job_.job;
    Map(node, p, {
        {"name", [&](const YAML::Node& n, const std::string& k) { j.name = String(n, k); }},
        {"command", [&](const YAML::Node& n, const std::string& k) {
           if (n.IsScalar()) Fail(n, k, "expected an argv list such as [\"/usr/bin/python3\", \"train.py\"] (never a shell string)");
           j.command = StringList(n, k);
         }},
        {"resume_args", [&](const YAML::Node& n, const std::string& k) { j.resume_args = StringList(n, k); }},
        {"workdir", [&](const YAML::Node& n, const std::string& k) { j.workdir = Path(n, k); }},
        {"env", [&](const YAML::Node& n, const std::string& k) {
           if (!n.IsMap()) Fail(n, k, "expected a mapping NAME: value");
           for (const auto& kv : n) j.env[kv.first.as<std::string>()] = Scalar(kv.second, k + "." + kv.first.as<std::string>(), "a string");
         }},
        {"success_exit_codes", [&](const YAML::Node& n, const std::string& k) {
           if (!n.IsSequence()) Fail(n, k, "expected a list of exit codes, e.g. [0]");
           j.success_exit_codes.clear();
           for (const auto& item : n) j.success_exit_codes.push_back(Int(item, k, 0, 255));
         }},
        {"stop_exit_code", [&](const YAML::Node& n, const std::string& k) { j.stop_exit_code = Int(n, k, 1, 255); }},
        {"result_file", [&](const YAML::Node& n, const std::string& k) { j.result_file = Path(n, k); }},
        {"labels", [&](const YAML::Node& n, const std::string& k) {
           if (!n.IsMap()) Fail(n, k, "expected a mapping name: value, e.g. {model: llama-7b, precision: bf16}");
           for (const auto& kv : n) j.labels[kv.first.as<std::string>()] = Scalar(kv.second, k + "." + kv.first.as<std::string>(), "a string");
         }},
    });
  }

  void ReadProvider(const YAML::Node& node, const std::string& p) {
    auto& v = job_.provider;
    Map(node, p, {
        {"kind", [&](const YAML::Node& n, const std::string& k) {
           v.kind = Enum<ProviderKind>(n, k, {{"auto", ProviderKind::kAuto}, {"aws", ProviderKind::kAws},
               {"gcp", ProviderKind::kGcp}, {"azure", ProviderKind::kAzure}, {"alibaba", ProviderKind::kAlibaba},
               {"file", ProviderKind::kFile}, {"none", ProviderKind::kNone}});
         }},
        {"endpoint", [&](const YAML::Node& n, const std::string& k) {
           v.endpoint = String(n, k);
           if (v.endpoint.rfind("http://", 0) != 0 && v.endpoint.rfind("https://", 0) != 0) {
             Fail(n, k, "'" + v.endpoint + "' is not a base URL (expected scheme://host:port, e.g. http://127.0.0.1:1338)");
           }
         }},
        {"poll_interval", [&](const YAML::Node& n, const std::string& k) { v.poll_interval = Dur(n, k); }},
        {"request_timeout", [&](const YAML::Node& n, const std::string& k) { v.request_timeout = Dur(n, k); }},
        {"safety_margin", [&](const YAML::Node& n, const std::string& k) { v.safety_margin = Dur(n, k); }},
        {"default_window", [&](const YAML::Node& n, const std::string& k) { v.default_window = Dur(n, k); }},
        {"min_grace", [&](const YAML::Node& n, const std::string& k) { v.min_grace = Dur(n, k); }},
        {"rebalance", [&](const YAML::Node& n, const std::string& k) {
           v.rebalance = Enum<RebalanceAction>(n, k, {{"ignore", RebalanceAction::kIgnore},
               {"checkpoint", RebalanceAction::kCheckpoint}, {"stop", RebalanceAction::kStop}});
         }},
        {"token_ttl", [&](const YAML::Node& n, const std::string& k) { v.token_ttl = Dur(n, k); }},
        {"imdsv1_fallback", [&](const YAML::Node& n, const std::string& k) { v.imdsv1_fallback = Bool(n, k); }},
        {"azure_vm_name", [&](const YAML::Node& n, const std::string& k) { v.azure_vm_name = String(n, k); }},
        {"azure_event_types", [&](const YAML::Node& n, const std::string& k) { v.azure_event_types = StringList(n, k); }},
        {"azure_acknowledge", [&](const YAML::Node& n, const std::string& k) { v.azure_acknowledge = Bool(n, k); }},
        {"file", [&](const YAML::Node& n, const std::string& k) { v.file = Path(n, k); }},
        {"dmi_root", [&](const YAML::Node& n, const std::string& k) { v.dmi_root = Path(n, k); }},
        {"resume_after", [&](const YAML::Node& n, const std::string& k) { v.resume_after = Dur(n, k); }},
        {"drained_timeout", [&](const YAML::Node& n, const std::string& k) { v.drained_timeout = Dur(n, k); }},
    });
  }

  void ReadSignals(const YAML::Node& node, const std::string& p) {
    auto& v = job_.signals;
    Map(node, p, {
        {"on_notice", [&](const YAML::Node& n, const std::string& k) { v.on_notice = Signal(n, k); }},
        {"checkpoint", [&](const YAML::Node& n, const std::string& k) { v.checkpoint = Signal(n, k); }},
        {"stop_on", [&](const YAML::Node& n, const std::string& k) {
           if (!n.IsSequence()) Fail(n, k, "expected a list of signals, e.g. [SIGTERM, SIGINT, SIGUSR2]");
           v.stop_on.clear();
           for (const auto& item : n) v.stop_on.push_back(Signal(item, k));
         }},
        {"target", [&](const YAML::Node& n, const std::string& k) {
           v.target = Enum<SignalTarget>(n, k, {{"auto", SignalTarget::kAuto}, {"group", SignalTarget::kGroup},
                                                {"main", SignalTarget::kMain}, {"workers", SignalTarget::kWorkers}});
         }},
        {"grace", [&](const YAML::Node& n, const std::string& k) { v.grace = Dur(n, k); }},
        {"kill_timeout", [&](const YAML::Node& n, const std::string& k) { v.kill_timeout = Dur(n, k); }},
        {"defer_stop", [&](const YAML::Node& n, const std::string& k) {
           v.defer_stop = Enum<bool>(n, k, {{"auto", true}, {"never", false}});
         }},
    });
  }

  void ReadCheckpoints(const YAML::Node& node, const std::string& p) {
    auto& v = job_.checkpoints;
    Map(node, p, {
        {"dir", [&](const YAML::Node& n, const std::string& k) { v.dir = Path(n, k); }},
        {"pattern", [&](const YAML::Node& n, const std::string& k) {
           v.pattern = String(n, k);
           if (auto parsed = config::NamePattern::Parse(v.pattern); !parsed) Fail(n, k, parsed.error().message);
         }},
        {"validate", [&](const YAML::Node& n, const std::string& k) {
           v.validate = Enum<ValidateLevel>(n, k, {{"structure", ValidateLevel::kStructure},
               {"format", ValidateLevel::kFormat}, {"full", ValidateLevel::kFull}});
         }},
        {"content", [&](const YAML::Node& n, const std::string& k) {
           v.content = Enum<ContentCheck>(n, k, {{"off", ContentCheck::kOff}, {"finite", ContentCheck::kFinite}});
         }},
        {"format", [&](const YAML::Node& n, const std::string& k) {
           v.format = Enum<std::string>(n, k, {{"auto", "auto"}, {"torch", "torch"}, {"safetensors", "safetensors"},
               {"dcp", "dcp"}, {"hf", "hf"}, {"deepspeed", "deepspeed"},
               {"megatron", "megatron"}, {"orbax", "orbax"}, {"accelerate", "accelerate"}, {"any", "any"}});
         }},
        {"marker", [&](const YAML::Node& n, const std::string& k) { v.marker = String(n, k); }},
        {"keep", [&](const YAML::Node& n, const std::string& k) { v.keep = Int(n, k, 0, 1000000); }},
        {"quarantine", [&](const YAML::Node& n, const std::string& k) { v.quarantine = Bool(n, k); }},
        {"latest_link", [&](const YAML::Node& n, const std::string& k) { v.latest_link = String(n, k); }},
        {"rewrite_hints", [&](const YAML::Node& n, const std::string& k) { v.rewrite_hints = Bool(n, k); }},
        {"processes", [&](const YAML::Node& n, const std::string& k) {
           v.processes = n.IsScalar() && n.Scalar() == "auto" ? 0 : Int(n, k, 1, 65536);
         }},
        {"select_timeout", [&](const YAML::Node& n, const std::string& k) { v.select_timeout = Dur(n, k); }},
        {"mirror", [&](const YAML::Node& n, const std::string& k) {
           Map(n, k, {
               {"path", [&](const YAML::Node& n2, const std::string& k2) { v.mirror.path = Path(n2, k2); }},
               {"command", [&](const YAML::Node& n2, const std::string& k2) { v.mirror.command = StringList(n2, k2); }},
               {"remote", [&](const YAML::Node& n2, const std::string& k2) { v.mirror.remote = String(n2, k2); }},
               {"rclone_flags", [&](const YAML::Node& n2, const std::string& k2) { v.mirror.rclone_flags = StringList(n2, k2); }},
               {"keep", [&](const YAML::Node& n2, const std::string& k2) { v.mirror.keep = Int(n2, k2, 0, 1000000); }},
               {"restore_command", [&](const YAML::Node& n2, const std::string& k2) { v.mirror.restore_command = StringList(n2, k2); }},
               {"prune_command", [&](const YAML::Node& n2, const std::string& k2) { v.mirror.prune_command = StringList(n2, k2); }},
               {"bandwidth", [&](const YAML::Node& n2, const std::string& k2) {
                  auto size = ParseSize(Scalar(n2, k2, "a rate such as 100MiB (per second)"));
                  if (!size) Fail(n2, k2, size.error().message);
                  v.mirror.bandwidth = *size;
                }},
               {"concurrency", [&](const YAML::Node& n2, const std::string& k2) { v.mirror.concurrency = Int(n2, k2, 1, 64); }},
               {"timeout", [&](const YAML::Node& n2, const std::string& k2) { v.mirror.timeout = Dur(n2, k2); }},
               {"restore", [&](const YAML::Node& n2, const std::string& k2) { v.mirror.restore = Bool(n2, k2); }},
           });
         }},
    });
  }

  void ReadRestart(const YAML::Node& node, const std::string& p) {
    auto& v = job_.restart;
    Map(node, p, {
        {"max_restarts", [&](const YAML::Node& n, const std::string& k) { v.max_restarts = Int(n, k); }},
        {"max_hangs", [&](const YAML::Node& n, const std::string& k) { v.max_hangs = Int(n, k); }},
        {"no_progress_limit", [&](const YAML::Node& n, const std::string& k) { v.no_progress_limit = Int(n, k); }},
        {"backoff", [&](const YAML::Node& n, const std::string& k) {
           Map(n, k, {
               {"initial", [&](const YAML::Node& n2, const std::string& k2) { v.backoff.initial = Dur(n2, k2); }},
               {"max", [&](const YAML::Node& n2, const std::string& k2) { v.backoff.max = Dur(n2, k2); }},
               {"multiplier", [&](const YAML::Node& n2, const std::string& k2) { v.backoff.multiplier = Number(n2, k2, 1.0, 100.0); }},
               {"jitter", [&](const YAML::Node& n2, const std::string& k2) { v.backoff.jitter = Number(n2, k2, 0.0, 1.0); }},
               {"reset_after", [&](const YAML::Node& n2, const std::string& k2) { v.backoff.reset_after = Dur(n2, k2); }},
           });
         }},
        {"crash_loop", [&](const YAML::Node& n, const std::string& k) {
           Map(n, k, {
               {"failures", [&](const YAML::Node& n2, const std::string& k2) { v.crash_loop.failures = Int(n2, k2); }},
               {"window", [&](const YAML::Node& n2, const std::string& k2) { v.crash_loop.window = Dur(n2, k2); }},
           });
         }},
    });
  }

  void ReadCadence(const YAML::Node& node, const std::string& p) {
    auto& v = job_.cadence;
    Map(node, p, {
        {"every", [&](const YAML::Node& n, const std::string& k) {
           const std::string s = Scalar(n, k, "a duration, \"adaptive\" or \"off\"");
           if (s == "off") {
             v.mode = CadenceMode::kOff;
           } else if (s == "adaptive") {
             v.mode = CadenceMode::kAdaptive;
           } else {
             auto d = ParseDuration(s);
             if (!d) Fail(n, k, d.error().message + ", \"adaptive\" or \"off\"");
             v.mode = CadenceMode::kFixed;
             v.every = *d;
           }
         }},
        {"min", [&](const YAML::Node& n, const std::string& k) { v.min = Dur(n, k); }},
        {"max", [&](const YAML::Node& n, const std::string& k) { v.max = Dur(n, k); }},
        {"mtbi_prior", [&](const YAML::Node& n, const std::string& k) { v.mtbi_prior = Dur(n, k); }},
        {"mtbi_priors", [&](const YAML::Node& n, const std::string& k) {
           if (!n.IsMap()) Fail(n, k, "expected a mapping provider: duration, e.g. {aws: 6h, gcp: 3h}");
           for (const auto& kv : n) {
             const auto provider = kv.first.as<std::string>();
             if (provider != "aws" && provider != "gcp" && provider != "azure" && provider != "alibaba" &&
                 provider != "file" && provider != "none") {
               Fail(kv.first, k, "'" + provider + "' is not one of aws | gcp | azure | alibaba | file | none");
             }
             v.mtbi_priors[provider] = Dur(kv.second, k + "." + provider);
           }
         }},
    });
  }

  void ReadHealth(const YAML::Node& node, const std::string& p) {
    auto& v = job_.health;
    Map(node, p, {
        {"heartbeat_file", [&](const YAML::Node& n, const std::string& k) { v.heartbeat_file = Path(n, k); }},
        {"progress_pattern", [&](const YAML::Node& n, const std::string& k) { v.progress_pattern = Regex(n, k); }},
        {"hang_timeout", [&](const YAML::Node& n, const std::string& k) { v.hang_timeout = Dur(n, k); }},
    });
  }

  void ReadTelemetry(const YAML::Node& node, const std::string& p) {
    auto& v = job_.telemetry;
    Map(node, p, {
        {"state_dir", [&](const YAML::Node& n, const std::string& k) { v.state_dir = Path(n, k); }},
        {"metrics", [&](const YAML::Node& n, const std::string& k) {
           Map(n, k, {
               {"listen", [&](const YAML::Node& n2, const std::string& k2) { v.metrics.listen = String(n2, k2); }},
               {"token_file", [&](const YAML::Node& n2, const std::string& k2) { v.metrics.token_file = Path(n2, k2); }},
           });
         }},
        {"log_format", [&](const YAML::Node& n, const std::string& k) {
           v.log_format = Enum<LogFormat>(n, k, {{"text", LogFormat::kText}, {"json", LogFormat::kJson}});
         }},
        {"log_level", [&](const YAML::Node& n, const std::string& k) {
           v.log_level = Enum<std::string>(n, k, {{"debug", "debug"}, {"info", "info"}, {"warning", "warning"},
               {"error", "error"}, {"critical", "critical"}});
         }},
        {"report_path", [&](const YAML::Node& n, const std::string& k) { v.report_path = Path(n, k); }},
        {"fingerprint_files", [&](const YAML::Node& n, const std::string& k) {
           v.fingerprint_files.clear();
           if (!n.IsSequence()) Fail(n, k, "expected a list of paths, e.g. [./uv.lock]");
           for (const auto& item : n) v.fingerprint_files.push_back(Path(item, k));
         }},
        {"gpu_interval", [&](const YAML::Node& n, const std::string& k) { v.gpu_interval = Dur(n, k); }},
        {"termination_log", [&](const YAML::Node& n, const std::string& k) { v.termination_log = Path(n, k); }},
    });
  }

  void ReadSlurm(const YAML::Node& node, const std::string& p) {
    auto& v = job_.slurm;
    Map(node, p, {
        {"requeue_on", [&](const YAML::Node& n, const std::string& k) {
           if (!n.IsSequence()) Fail(n, k, "expected a list of signals and 'notice', e.g. [notice, SIGUSR2]");
           v.requeue_on.clear();
           for (const auto& item : n) {
             v.requeue_on.push_back(item.IsScalar() && item.Scalar() == "notice" ? kRequeueOnNotice : Signal(item, k));
           }
         }},
        {"scontrol", [&](const YAML::Node& n, const std::string& k) { v.scontrol = String(n, k); }},
    });
  }

  void ReadCoordination(const YAML::Node& node, const std::string& p) {
    auto& v = job_.coordination;
    Map(node, p, {
        {"etcd", [&](const YAML::Node& n, const std::string& k) {
           if (!n.IsSequence()) Fail(n, k, "expected a list of etcd member URLs, e.g. [\"http://10.0.0.5:2379\"]");
           v.etcd = StringList(n, k);
         }},
        {"nodes", [&](const YAML::Node& n, const std::string& k) { v.nodes = Int(n, k, 1, 4096); }},
        {"node_rank", [&](const YAML::Node& n, const std::string& k) {
           v.node_rank = n.IsScalar() && n.Scalar() == "auto" ? kAutoRank : Int(n, k, 0, 4095);
         }},
        {"prefix", [&](const YAML::Node& n, const std::string& k) {
           v.prefix = String(n, k);
           if (v.prefix.empty() || v.prefix.front() != '/') Fail(n, k, "must start with '/', e.g. /spotvisor");
           while (v.prefix.size() > 1 && v.prefix.back() == '/') v.prefix.pop_back();
         }},
        {"spares", [&](const YAML::Node& n, const std::string& k) { v.spares = Int(n, k, 0, 64); }},
        {"min_nodes", [&](const YAML::Node& n, const std::string& k) { v.min_nodes = Int(n, k, 1, 4096); }},
        {"shrink_after", [&](const YAML::Node& n, const std::string& k) { v.shrink_after = Dur(n, k); }},
        {"grow_wait", [&](const YAML::Node& n, const std::string& k) { v.grow_wait = Dur(n, k); }},
        {"lease_ttl", [&](const YAML::Node& n, const std::string& k) { v.lease_ttl = Dur(n, k); }},
        {"join_timeout", [&](const YAML::Node& n, const std::string& k) { v.join_timeout = Dur(n, k); }},
        {"advertise", [&](const YAML::Node& n, const std::string& k) { v.advertise = String(n, k); }},
        {"master_port", [&](const YAML::Node& n, const std::string& k) { v.master_port = Int(n, k, 1, 65535); }},
        {"credentials", [&](const YAML::Node& n, const std::string& k) { v.credentials = Path(n, k); }},
        {"tls", [&](const YAML::Node& n, const std::string& k) {
           Map(n, k, {
               {"ca", [&](const YAML::Node& f, const std::string& fk) { v.tls.ca = Path(f, fk); }},
               {"cert", [&](const YAML::Node& f, const std::string& fk) { v.tls.cert = Path(f, fk); }},
               {"key", [&](const YAML::Node& f, const std::string& fk) { v.tls.key = Path(f, fk); }},
           });
         }},
    });
  }

  void ReadHooks(const YAML::Node& node, const std::string& p) {
    auto& v = job_.hooks;
    const auto hook = [&](HookSpec& spec) {
      return [&](const YAML::Node& n, const std::string& k) {
        Map(n, k, {
            {"command", [&](const YAML::Node& n2, const std::string& k2) {
               if (n2.IsScalar()) Fail(n2, k2, "expected an argv list such as [\"/usr/local/bin/upload\", \"{checkpoint}\"] (never a shell string)");
               spec.command = StringList(n2, k2);
               if (spec.command.empty()) Fail(n2, k2, "an empty command");
               for (const auto& arg : spec.command) {
                 auto names = TemplateNames(arg);
                 if (!names) Fail(n2, k2, names.error().message);
                 for (const auto& name : *names) {
                   if (kHookTemplates.count(name) == 0) Fail(n2, k2, "placeholder {" + name + "} is not known in hooks (known: " + HookTemplateList() + ")");
                 }
               }
             }},
            {"timeout", [&](const YAML::Node& n2, const std::string& k2) {
               spec.timeout = Dur(n2, k2);
               if (spec.timeout.count() <= 0) Fail(n2, k2, "must be longer than 0");
             }},
        });
        if (spec.command.empty()) Fail(n, k, "a hook needs a command (argv list)");
      };
    };
    Map(node, p, {
        {"before_start", hook(v.before_start)},
        {"on_checkpoint", hook(v.on_checkpoint)},
        {"on_notice", hook(v.on_notice)},
        {"on_finish", hook(v.on_finish)},
    });
  }
  static std::string HookTemplateList() {
    std::string out;
    for (const auto& name : kHookTemplates) out += (out.empty() ? "{" : ", {") + name + "}";
    return out;
  }
};
// clang-format on

}  // namespace

void ReadJobDocument(const YAML::Node& root, JobConfig& job, const std::string& origin) {
  Reader(job, origin).ReadDocument(root);
}

}  // namespace spotvisor::config

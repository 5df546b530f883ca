// The job file schema: one table of keys per section, each key with its parser. Unknown
// keys are errors (a typo must never silently disable a safety feature). Internally a
// ConfigError exception carries the message to the API boundary, where it becomes an Error.
#include "spotvisor/config/loader.hpp"
#include "spotvisor/config/signals.hpp"

#include <yaml-cpp/yaml.h>

#include <cstring>
#include <fstream>
#include <functional>
#include <regex>
#include <optional>
#include <set>
#include <sstream>
#include <string_view>
#include <vector>

#include "config_error.hpp"
#include "spotvisor/checkpoint/name_pattern.hpp"
#include "spotvisor/config/templates.hpp"

namespace spotvisor::config {
namespace {

// Reads one YAML document into a JobConfig, remembering where each key was.
class Reader {
 public:
  Reader(JobConfig& job, std::string origin) : job_(job), origin_(std::move(origin)) {}

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
        {"cost", [&](const YAML::Node& n, const std::string& p) { ReadCost(n, p); }},
        {"hooks", [&](const YAML::Node& n, const std::string& p) { ReadHooks(n, p); }},
    });
  }

 private:
  using Field = std::function<void(const YAML::Node&, const std::string&)>;

  [[noreturn]] void Fail(const YAML::Node& n, const std::string& key, const std::string& what) {
    std::string message = Where(n);
    if (!key.empty()) message.append(key).append(": ");
    // `key:` or `key: ~` never quietly means the default: say so.
    if (n.IsNull()) message.append("has no value (nothing, or ~, after the colon); ").append(what).append(", or remove the line to keep the default");
    else message.append(what);
    throw ConfigError(message);
  }
  std::string Where(const YAML::Node& n) const {
    const int line = n.IsNull() ? value_line_ : n.Mark().line >= 0 ? n.Mark().line + 1 : 0;
    std::string where = origin_;
    if (line > 0) where.append(":").append(std::to_string(line));
    return where.append(": ");
  }

  void Map(const YAML::Node& node, const std::string& path, const std::map<std::string, Field>& fields) {
    if (node.IsNull()) return;  // `section:` with nothing under it: all defaults
    if (!node.IsMap()) Fail(node, path.empty() ? "document" : path, "expected a mapping of keys");
    for (const auto& kv : node) {
      const auto key = kv.first.as<std::string>();
      const std::string full = path.empty() ? key : path + "." + key;
      const auto it = fields.find(key);
      if (it == fields.end()) {
        Fail(kv.first, "", "unknown key '" + full + "'" + Suggest(key, fields));
      }
      job_.key_lines[full] = kv.first.Mark().line + 1;
      value_line_ = kv.first.Mark().line + 1;  // an empty value has no position of its own
      it->second(kv.second, full);
    }
  }

  static std::size_t Distance(const std::string& a, const std::string& b) {
    std::vector<std::size_t> row(b.size() + 1);
    for (std::size_t j = 0; j <= b.size(); ++j) row[j] = j;
    for (std::size_t i = 1; i <= a.size(); ++i) {
      std::size_t diag = row[0];
      row[0] = i;
      for (std::size_t j = 1; j <= b.size(); ++j) {
        const std::size_t up = row[j];
        row[j] = std::min({row[j] + 1, row[j - 1] + 1, diag + (a[i - 1] == b[j - 1] ? 0u : 1u)});
        diag = up;
      }
    }
    return row[b.size()];
  }
  static std::string Suggest(const std::string& key, const std::map<std::string, Field>& fields) {
    std::string best;
    std::size_t best_d = 3;
    for (const auto& [name, _] : fields) {
      const auto d = Distance(key, name);
      if (d < best_d) best_d = d, best = name;
    }
    std::string known;
    for (const auto& [name, _] : fields) known += (known.empty() ? "" : ", ") + name;
    return best.empty() ? " (known keys: " + known + ")" : " (did you mean '" + best + "'?)";
  }

  std::string Scalar(const YAML::Node& n, const std::string& key, const char* expected) {
    if (!n.IsScalar()) Fail(n, key, std::string("expected ") + expected);
    return n.Scalar();
  }
  std::string String(const YAML::Node& n, const std::string& key) { return Scalar(n, key, "a string"); }
  std::filesystem::path Path(const YAML::Node& n, const std::string& key) {
    const std::string s = Scalar(n, key, "a path");
    if (s.empty()) Fail(n, key, "expected a path, got an empty string");
    std::filesystem::path p(s);
    p = p.is_absolute() ? p.lexically_normal() : (job_.base_dir / p).lexically_normal();
    if (p.has_relative_path() && p.filename().empty()) p = p.parent_path();  // "dir/" -> "dir"
    return p;
  }
  long long Integer(const YAML::Node& n, const std::string& key, long long lo, long long hi) {
    const std::string s = Scalar(n, key, "an integer");
    long long v = 0;
    std::size_t used = 0;
    try {
      v = std::stoll(s, &used);
    } catch (const std::exception&) {
      used = 0;
    }
    if (used != s.size() || s.empty()) Fail(n, key, "'" + s + "' is not an integer");
    if (v < lo || v > hi) {
      Fail(n, key, std::to_string(v) + " is out of range (expected " + std::to_string(lo) + ".." +
                       std::to_string(hi) + ")");
    }
    return v;
  }
  int Int(const YAML::Node& n, const std::string& key, int lo = 0, int hi = 1000000) {
    return static_cast<int>(Integer(n, key, lo, hi));
  }
  double Number(const YAML::Node& n, const std::string& key, double lo, double hi) {
    const std::string s = Scalar(n, key, "a number");
    double v = 0;
    std::size_t used = 0;
    try {
      v = std::stod(s, &used);
    } catch (const std::exception&) {
      used = 0;
    }
    if (used != s.size() || s.empty()) Fail(n, key, "'" + s + "' is not a number");
    if (v < lo || v > hi) {
      std::ostringstream range;
      range << lo << ".." << hi;
      Fail(n, key, s + " is out of range (expected " + range.str() + ")");
    }
    return v;
  }
  bool Bool(const YAML::Node& n, const std::string& key) {
    const std::string s = Scalar(n, key, "true or false");
    if (s == "true" || s == "yes" || s == "on") return true;
    if (s == "false" || s == "no" || s == "off") return false;
    Fail(n, key, "'" + s + "' is not a boolean (expected true or false)");
  }
  Duration Dur(const YAML::Node& n, const std::string& key) {
    auto d = ParseDuration(Scalar(n, key, "a duration such as 90s"));
    if (!d) Fail(n, key, d.error().message);
    return *d;
  }
  int Signal(const YAML::Node& n, const std::string& key) {
    auto s = ParseSignal(Scalar(n, key, "a signal name such as SIGTERM"));
    if (!s) Fail(n, key, s.error().message);
    return *s;
  }
  std::vector<std::string> StringList(const YAML::Node& n, const std::string& key) {
    if (!n.IsSequence()) Fail(n, key, "expected a list of strings, e.g. [\"a\", \"b\"]");
    std::vector<std::string> out;
    for (const auto& item : n) out.push_back(Scalar(item, key, "a string in the list"));
    return out;
  }
  template <class E>
  E Enum(const YAML::Node& n, const std::string& key, const std::vector<std::pair<std::string, E>>& values) {
    const std::string s = Scalar(n, key, "one of the listed words");
    std::string names;
    for (const auto& [name, value] : values) {
      if (s == name) return value;
      names += (names.empty() ? "" : " | ") + name;
    }
    Fail(n, key, "'" + s + "' is not one of " + names);
  }

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
    });
  }

  void ReadSignals(const YAML::Node& node, const std::string& p) {
    auto& v = job_.signals;
    Map(node, p, {
        {"on_notice", [&](const YAML::Node& n, const std::string& k) { v.on_notice = Signal(n, k); }},
        {"checkpoint", [&](const YAML::Node& n, const std::string& k) { v.checkpoint = Signal(n, k); }},
        {"target", [&](const YAML::Node& n, const std::string& k) {
           v.target = Enum<SignalTarget>(n, k, {{"auto", SignalTarget::kAuto}, {"group", SignalTarget::kGroup},
                                                {"main", SignalTarget::kMain}, {"workers", SignalTarget::kWorkers}});
         }},
        {"grace", [&](const YAML::Node& n, const std::string& k) { v.grace = Dur(n, k); }},
        {"kill_timeout", [&](const YAML::Node& n, const std::string& k) { v.kill_timeout = Dur(n, k); }},
    });
  }

  void ReadCheckpoints(const YAML::Node& node, const std::string& p) {
    auto& v = job_.checkpoints;
    Map(node, p, {
        {"dir", [&](const YAML::Node& n, const std::string& k) { v.dir = Path(n, k); }},
        {"pattern", [&](const YAML::Node& n, const std::string& k) {
           v.pattern = String(n, k);
           if (auto parsed = checkpoint::NamePattern::Parse(v.pattern); !parsed) Fail(n, k, parsed.error().message);
         }},
        {"validate", [&](const YAML::Node& n, const std::string& k) {
           v.validate = Enum<ValidateLevel>(n, k, {{"structure", ValidateLevel::kStructure},
               {"format", ValidateLevel::kFormat}, {"full", ValidateLevel::kFull}});
         }},
        {"format", [&](const YAML::Node& n, const std::string& k) {
           v.format = Enum<std::string>(n, k, {{"auto", "auto"}, {"torch", "torch"}, {"safetensors", "safetensors"},
               {"dcp", "dcp"}, {"hf", "hf"}, {"deepspeed", "deepspeed"},
               {"megatron", "megatron"}, {"orbax", "orbax"}, {"any", "any"}});
         }},
        {"marker", [&](const YAML::Node& n, const std::string& k) { v.marker = String(n, k); }},
        {"keep", [&](const YAML::Node& n, const std::string& k) { v.keep = Int(n, k, 0, 1000000); }},
        {"quarantine", [&](const YAML::Node& n, const std::string& k) { v.quarantine = Bool(n, k); }},
        {"latest_link", [&](const YAML::Node& n, const std::string& k) { v.latest_link = String(n, k); }},
        {"rewrite_hints", [&](const YAML::Node& n, const std::string& k) { v.rewrite_hints = Bool(n, k); }},
        {"mirror", [&](const YAML::Node& n, const std::string& k) {
           Map(n, k, {
               {"path", [&](const YAML::Node& n2, const std::string& k2) { v.mirror.path = Path(n2, k2); }},
               {"command", [&](const YAML::Node& n2, const std::string& k2) { v.mirror.command = StringList(n2, k2); }},
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

  // An ECMAScript regular expression (std::regex), compiled once here so a bad one is a
  // config error that names the line, not a failure mid-run.
  std::string Regex(const YAML::Node& n, const std::string& key) {
    std::string text = String(n, key);
    try {
      std::regex compiled(text, std::regex::ECMAScript);
    } catch (const std::regex_error& e) {
      Fail(n, key, "not a valid regular expression (" + std::string(e.what()) + "): " + text);
    }
    return text;
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
    });
  }

  // A price or quantity: a number >= 0, `unknown`, or a range [low, high].
  CostValue Cost(const YAML::Node& n, const std::string& key) {
    if (n.IsSequence()) {
      if (n.size() != 2) Fail(n, key, "a range is [low, high]");
      const double low = Number(n[0], key, 0, 1e15), high = Number(n[1], key, 0, 1e15);
      if (low > high) Fail(n, key, "range [low, high] has low > high");
      return CostValue{true, low, high};
    }
    if (n.IsScalar() && n.Scalar() == "unknown") return CostValue{};
    const double v = Number(n, key, 0, 1e15);
    return CostValue{true, v, v};
  }

  void ReadCost(const YAML::Node& node, const std::string& p) {
    auto& v = job_.cost;
    if (node.IsNull()) return;  // `cost:` with nothing under it: no prices
    v.configured = true;
    Map(node, p, {
        {"currency", [&](const YAML::Node& n, const std::string& k) { v.currency = String(n, k); }},
        {"gpu_hour", [&](const YAML::Node& n, const std::string& k) { v.gpu_hour = Cost(n, k); }},
        {"gpus", [&](const YAML::Node& n, const std::string& k) { v.gpus = Int(n, k, 1, 100000); }},
        {"node_hour", [&](const YAML::Node& n, const std::string& k) { v.node_hour = Cost(n, k); }},
        {"billing_minimum", [&](const YAML::Node& n, const std::string& k) { v.billing_minimum = Dur(n, k); }},
        {"billing_from", [&](const YAML::Node& n, const std::string& k) {
           v.bill_from_boot = Enum<bool>(n, k, {{"start", false}, {"boot", true}});
         }},
        {"disk_gb", [&](const YAML::Node& n, const std::string& k) { v.disk_gb = Cost(n, k); }},
        {"disk_gb_month", [&](const YAML::Node& n, const std::string& k) { v.disk_gb_month = Cost(n, k); }},
        {"snapshot_gb", [&](const YAML::Node& n, const std::string& k) { v.snapshot_gb = Cost(n, k); }},
        {"snapshot_gb_month", [&](const YAML::Node& n, const std::string& k) { v.snapshot_gb_month = Cost(n, k); }},
        {"egress_gb", [&](const YAML::Node& n, const std::string& k) { v.egress_gb = Cost(n, k); }},
        {"egress_per_gb", [&](const YAML::Node& n, const std::string& k) { v.egress_per_gb = Cost(n, k); }},
        {"public_ip_hour", [&](const YAML::Node& n, const std::string& k) { v.public_ip_hour = Cost(n, k); }},
        {"support_month", [&](const YAML::Node& n, const std::string& k) { v.support_month = Cost(n, k); }},
        {"other_hour", [&](const YAML::Node& n, const std::string& k) {
           if (!n.IsMap()) Fail(n, k, "expected a mapping name: price per hour");
           for (const auto& kv : n) v.other_hour[kv.first.as<std::string>()] = Cost(kv.second, k + "." + kv.first.as<std::string>());
         }},
        {"unknown", [&](const YAML::Node& n, const std::string& k) { v.unknown = StringList(n, k); }},
        {"budget", [&](const YAML::Node& n, const std::string& k) { v.budget = Number(n, k, 0, 1e15); }},
        {"warn_fraction", [&](const YAML::Node& n, const std::string& k) { v.warn_fraction = Number(n, k, 0, 1); }},
        {"check_interval", [&](const YAML::Node& n, const std::string& k) {
           v.check_interval = Dur(n, k);
           if (v.check_interval.count() <= 0) Fail(n, k, "must be longer than 0");
         }},
    });
    if (v.gpu_hour.known && v.node_hour.known) {
      Fail(node, p, "set gpu_hour or node_hour, not both (a node-hour price already includes its GPUs)");
    }
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

  JobConfig& job_;      // what we fill
  std::string origin_;  // the file name as shown in messages
  int value_line_ = 0;  // line of the key being read (for a value that has none)
};

}  // namespace

JobConfig DefaultConfig(const std::filesystem::path& base_dir) {
  JobConfig job;
  job.base_dir = base_dir;
  return job;
}

namespace {

// yaml-cpp recurses once per nesting level, so a broken or hostile file ("[[[[..." or
// "- - - - ...") must be refused before it parses, not overflow the stack. A conservative
// estimate per line: open indentation levels + leading "- "/"? " indicators + flow depth.
constexpr std::size_t kMaxNesting = 64;

std::optional<int> TooDeep(std::string_view text) {
  std::vector<std::size_t> indents;  // indentation of the open block levels
  std::size_t flow = 0;              // open [ and {
  int line_no = 0;
  for (std::size_t pos = 0; pos < text.size();) {
    std::size_t end = text.find('\n', pos);
    if (end == std::string_view::npos) end = text.size();
    const std::string_view line = text.substr(pos, end - pos);
    pos = end + 1;
    ++line_no;
    std::size_t i = line.find_first_not_of(' ');
    if (i == std::string_view::npos || line[i] == '#') continue;
    if (flow == 0) {
      while (!indents.empty() && indents.back() >= i) indents.pop_back();
      indents.push_back(i);
    }
    std::size_t indicators = 0;
    while (i + 1 < line.size() && (line[i] == '-' || line[i] == '?') && line[i + 1] == ' ') {
      ++indicators;
      i = line.find_first_not_of(' ', i + 1);
      if (i == std::string_view::npos) i = line.size();
    }
    char quote = 0;
    for (std::size_t k = i; k < line.size(); ++k) {
      const char c = line[k];
      if (quote != 0) {
        if (c == quote) quote = 0;
      } else if (c == '"' || c == '\'') {
        quote = c;
      } else if (c == '#' && k > 0 && line[k - 1] == ' ') {
        break;
      } else if (c == '[' || c == '{') {
        ++flow;
      } else if ((c == ']' || c == '}') && flow > 0) {
        --flow;
      }
      if (indents.size() + indicators + flow > kMaxNesting) return line_no;
    }
    if (indents.size() + indicators + flow > kMaxNesting) return line_no;
  }
  return std::nullopt;
}

}  // namespace

Result<JobConfig> LoadJobText(const std::string& yaml, const std::filesystem::path& origin,
                              const std::filesystem::path& base_dir) {
  JobConfig job = DefaultConfig(base_dir);
  job.source_file = origin;
  if (const auto line = TooDeep(yaml)) {
    return Error{origin.string() + ":" + std::to_string(*line) + ": nested deeper than " +
                 std::to_string(kMaxNesting) + " levels: not a job file"};
  }
  try {
    const YAML::Node root = YAML::Load(yaml);
    Reader(job, origin.string()).ReadDocument(root);
  } catch (const ConfigError& e) {
    return Error{e.what()};
  } catch (const YAML::Exception& e) {
    return Error{origin.string() + ":" + std::to_string(e.mark.line + 1) + ": not valid YAML: " + e.msg};
  }
  if (job.job.name.empty()) job.job.name = origin.stem().string();
  return job;
}

Result<JobConfig> LoadJobFile(const std::filesystem::path& file) {
  std::ifstream in(file);
  if (!in) return Error{file.string() + ": cannot read the job file (" + std::strerror(errno) + ")"};
  std::ostringstream text;
  text << in.rdbuf();
  if (text.str().size() > (4u << 20)) return Error{file.string() + ": job file larger than 4 MiB"};
  const auto absolute = std::filesystem::absolute(file).lexically_normal();
  return LoadJobText(text.str(), file, absolute.parent_path());
}

}  // namespace spotvisor::config

// The effective configuration of one job: plain structs, filled with documented defaults,
// then from the job file, then from command-line flags. Everyone reads these; only the
// config module writes them. Paths here are absolute once loading has finished.
#pragma once

#include <csignal>
#include <cstdint>
#include <filesystem>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "spotvisor/log/log.hpp"
#include "spotvisor/util/units.hpp"

namespace spotvisor::config {

struct JobSection {
  std::string name;                                  // default: the job file's stem, else "job"
  std::vector<std::string> command;                  // argv; templates allowed; never a shell
  std::vector<std::string> resume_args;              // appended when a good checkpoint exists
  std::filesystem::path workdir;                     // default: the job file's directory
  std::map<std::string, std::string> env;            // added to the inherited environment
  std::vector<int> success_exit_codes{0};            // exit codes that mean "the job is done"
  int stop_exit_code = 75;                           // spotvisor's own exit code for "stopped, resumable"
  std::optional<std::filesystem::path> result_file;  // what the trainer writes at the end
  std::map<std::string, std::string> labels;         // free-form (model version, precision, ...): report + info metric
};

enum class ProviderKind { kAuto, kAws, kGcp, kAzure, kAlibaba, kFile, kNone };
// "auto" | "aws" | "gcp" | "azure" | "alibaba" | "file" | "none": the provider.kind spelling.
const char* ToString(ProviderKind kind);
enum class RebalanceAction { kIgnore, kCheckpoint, kStop };

struct ProviderSection {
  ProviderKind kind = ProviderKind::kAuto;  // auto: from DMI, no network probe; never auto once finalized
  std::string detected_from;                // kind was auto: the DMI evidence, "sys_vendor='Amazon EC2'"
  std::string endpoint;                     // scheme://host:port; empty = provider's own
  Duration poll_interval = std::chrono::seconds(1);
  Duration request_timeout = std::chrono::seconds(2);        // deadline of one metadata request
  Duration safety_margin = std::chrono::seconds(5);          // kept free before the deadline
  Duration default_window = std::chrono::seconds(30);        // when the notice gives no deadline
  Duration min_grace = std::chrono::seconds(5);              // the least a notice leaves the trainer
  RebalanceAction rebalance = RebalanceAction::kCheckpoint;  // aws rebalance recommendation
  Duration token_ttl = std::chrono::hours(6);                // aws / alibaba token lifetime
  bool imdsv1_fallback = false;                              // aws: plain GETs when no token
  std::string azure_vm_name;                                 // empty = from instance metadata
  std::vector<std::string> azure_event_types{"Preempt", "Terminate"};
  bool azure_acknowledge = false;                       // StartRequests once drained
  std::filesystem::path file;                           // kind: file — its appearance is a notice
  std::filesystem::path dmi_root{"/sys/class/dmi/id"};  // kind: auto reads DMI here
  Duration resume_after = std::chrono::minutes(5);      // alive this long after a cleared notice: resume
  Duration drained_timeout = std::chrono::minutes(30);  // drained this long, machine still here: resume; 0 = wait
};

// Who gets the stop and checkpoint signals: the trainer's process group, its main process,
// or the workers of a launcher (torchrun...) that is the main process. kAuto is kWorkers
// for a recognized launcher, else kGroup (Finalize decides).
enum class SignalTarget { kAuto, kGroup, kMain, kWorkers };
// "auto" | "group" | "main" | "workers": the signals.target spelling.
const char* ToString(SignalTarget target);

struct SignalsSection {
  int on_notice = SIGTERM;   // sent on a notice and on SIGTERM/SIGINT to spotvisor
  int checkpoint = SIGUSR1;  // "checkpoint now and continue"
  // Signals to spotvisor that mean "stop" (SLURM: add SIGUSR1/SIGUSR2). SIGUSR1 not listed
  // here means "checkpoint now"; any other signal not listed keeps its default action.
  std::vector<int> stop_on{SIGTERM, SIGINT, SIGHUP};
  SignalTarget target = SignalTarget::kAuto;        // as configured
  SignalTarget auto_choice = SignalTarget::kGroup;  // what kAuto came to (Finalize)
  std::string target_why;                           // why, in words (Finalize)
  // The recipients in effect: never kAuto.
  SignalTarget Recipients() const { return target == SignalTarget::kAuto ? auto_choice : target; }
  Duration grace = std::chrono::seconds(90);         // capped by the provider's deadline
  Duration kill_timeout = std::chrono::seconds(10);  // after SIGKILL, how long the group may linger
  // signals.defer_stop: auto (true) lets a trainer none of whose processes catches on_notice
  // run on under a notice with a deadline until its next good checkpoint; never (false) stops it at once.
  bool defer_stop = true;
};

enum class ValidateLevel { kStructure, kFormat, kFull };
// What a checkpoint's tensors must hold beyond intact bytes: off, or no NaN/±Inf in any
// floating-point tensor (a checkpoint saved after the loss diverged is useless).
enum class ContentCheck { kOff, kFinite };

struct MirrorSection {
  std::optional<std::filesystem::path> path;  // copy validated checkpoints here
  std::vector<std::string> command;           // or run this (argv, templates)
  std::optional<std::string> remote;          // or an rclone remote (`s3:bucket/prefix`), markers and all
  std::vector<std::string> rclone_flags;      // remote form: appended to every rclone call
  int keep = 0;                               // 0 = same as checkpoints.keep
  std::vector<std::string> restore_command;   // command form: fetch the mirror into {restore_dir}
  std::vector<std::string> prune_command;     // command form: delete {name} from the mirror (retention)
  std::uint64_t bandwidth = 0;                // path and remote forms: bytes per second; 0 = unlimited
  int concurrency = 1;                        // uploads (copies or commands) at once
  Duration timeout = std::chrono::hours(1);   // command form: one command's time limit
  bool restore = true;                        // restore from the mirror on start when newer
};

struct CheckpointsSection {
  std::optional<std::filesystem::path> dir;   // unset: nothing to resume from
  std::string pattern = "checkpoint-{step}";  // {step} = digits; whole name must match
  ValidateLevel validate = ValidateLevel::kFull;
  ContentCheck content = ContentCheck::kOff;
  std::string format = "auto";  // auto | torch | safetensors | dcp | hf | orbax | any
  std::string marker;           // commit marker file name; empty = none
  int keep = 0;                 // keep this many good ones; 0 = keep all
  bool quarantine = true;       // move bad ones into .spotvisor-quarantine/
  std::string latest_link;      // name of a symlink to the newest good one
  bool rewrite_hints = false;   // rewrite DeepSpeed/Megatron pointer files
  // Processes that each write a share of one checkpoint (accelerate's random_states_<i>.pkl,
  // the Trainer's rng_state_<i>.pth): 0 = auto, the launcher's count (Finalize), if it says.
  int processes = 0;
  int auto_processes = 0;     // what auto came to: 0 = unknown (Finalize)
  std::string processes_why;  // why, in words (Finalize)
  int Processes() const { return processes != 0 ? processes : auto_processes; }
  Duration select_timeout = std::chrono::hours(2);  // one selection (restore + validation); 0 = none
  MirrorSection mirror;
};

struct BackoffSection {
  Duration initial = std::chrono::seconds(1);
  Duration max = std::chrono::minutes(5);
  double multiplier = 2.0;                          // >= 1
  double jitter = 0.2;                              // 0..1, fraction of the delay
  Duration reset_after = std::chrono::minutes(10);  // a run this long resets the backoff
};

struct CrashLoopSection {
  int failures = 5;                            // this many failures ...
  Duration window = std::chrono::minutes(10);  // ... within this window: give up
};

struct RestartSection {
  int max_restarts = 50;      // failure budget; preemptions never count
  int max_hangs = 10;         // hang budget
  int no_progress_limit = 5;  // restarts in a row without progress; 0 = off
  BackoffSection backoff;
  CrashLoopSection crash_loop;
};

enum class CadenceMode { kOff, kFixed, kAdaptive };

struct CadenceSection {
  CadenceMode mode = CadenceMode::kOff;
  Duration every = std::chrono::minutes(10);  // the fixed period
  Duration min = std::chrono::minutes(2);     // adaptive bounds
  Duration max = std::chrono::hours(2);
  Duration mtbi_prior = std::chrono::hours(3);  // adaptive: mean time between interruptions
  std::map<std::string, Duration> mtbi_priors;  // per provider (aws, gcp, ...); missing = mtbi_prior
};

struct HealthSection {
  std::optional<std::filesystem::path> heartbeat_file;  // its mtime is the trainer's pulse
  std::string progress_pattern;                         // regex on output lines; a group = step
  Duration hang_timeout = std::chrono::minutes(10);
};

using LogFormat = log::LogFormat;

struct MetricsSection {
  std::string listen;  // host:port; empty = metrics off
  std::optional<std::filesystem::path> token_file;
};

struct TelemetrySection {
  std::filesystem::path state_dir;  // default: <base>/.spotvisor/<job name>
  MetricsSection metrics;
  LogFormat log_format = LogFormat::kText;
  std::string log_level = "info";
  std::optional<std::filesystem::path> report_path;      // default: <state_dir>/report.{md,json}
  std::vector<std::filesystem::path> fingerprint_files;  // lock file, image digest file: hashed into the report
  Duration gpu_interval = std::chrono::seconds(10);      // NVML sampling period; 0 = no GPU telemetry
  std::optional<std::filesystem::path> termination_log;  // one JSON line <= 4 KiB at exit (/dev/termination-log)
};

// Under SLURM (SLURM_JOB_ID set): after a resumable stop for one of `requeue_on` (signal
// numbers; kRequeueOnNotice = a preemption notice), run `scontrol requeue $SLURM_JOB_ID`.
inline constexpr int kRequeueOnNotice = 0;
struct SlurmSection {
  std::vector<int> requeue_on{kRequeueOnNotice, SIGUSR1, SIGUSR2};  // empty = never requeue
  std::string scontrol = "scontrol";                                // the command (a name on PATH or a path)
};

// A multi-node job (README "Multi-node jobs"): one spotvisor per node, agreeing through etcd
// on when and from where the group starts, and stopping together. Off unless `etcd` is set.
inline constexpr int kAutoRank = -1;
// Client TLS for https etcd members (coordination.tls).
struct CoordinationTls {
  std::optional<std::filesystem::path> ca;    // PEM CA certificates; not set: the system's trust store
  std::optional<std::filesystem::path> cert;  // PEM client certificate (mutual TLS); set with `key`
  std::optional<std::filesystem::path> key;   // its PEM private key, unencrypted, mode 0600
  bool set() const { return ca || cert || key; }
};

struct CoordinationSection {
  std::vector<std::string> etcd;                    // member URLs (v3 JSON gateway); empty = one node alone
  int nodes = 1;                                    // the group starts only when all are there
  int node_rank = kAutoRank;                        // 0..nodes-1, or auto: the lowest free rank
  int spares = 0;                                   // nodes beyond `nodes` that wait to take a lost rank
  int min_nodes = 0;                                // a group this small may train on (0: `nodes`, i.e. never fewer)
  Duration shrink_after = std::chrono::minutes(5);  // a lost rank unfilled this long: start with fewer
  // A node joined the shrunken group, whose trainer cannot save on the stop signal: the
  // group trains on to its next good checkpoint for at most this long, then stops anyway.
  Duration grow_wait = std::chrono::minutes(30);
  std::string prefix = "/spotvisor";                 // keys under <prefix>/<job.name>/
  Duration lease_ttl = std::chrono::seconds(10);     // a node whose lease lapses is gone
  Duration join_timeout = std::chrono::minutes(30);  // waiting for the whole group, then exit 75
  std::string advertise;                             // this node's address for peers; empty: the canonical host name
  int master_port = 29500;                           // {master_port}: node 0's rendezvous port
  std::optional<std::filesystem::path> credentials;  // etcd "name:password", mode 0600
  CoordinationTls tls;                               // https members only
  bool enabled() const { return !etcd.empty(); }
  // min_nodes below nodes: a group that lost a rank may train on with fewer.
  bool shrinks() const { return min_nodes > 0 && min_nodes < nodes; }
};

// One price or quantity of the cost model. Never a silent zero: a component nobody priced
// stays unknown and the report lists it; a range [low, high] is an honest estimate.
struct CostValue {
  bool known = false;  // false: unknown (the default for every component)
  double low = 0;      // known: low == high for an exact value
  double high = 0;
};

struct CostSection {
  bool configured = false;                      // a cost section was given
  std::string currency = "USD";                 // a label only
  CostValue gpu_hour;                           // price of one GPU-hour (accelerator pricing) ...
  int gpus = 1;                                 // ... times this many GPUs
  CostValue node_hour;                          // or price of one node-hour (whole VM); not both
  Duration billing_minimum = Duration::zero();  // each machine session is billed at least this
  bool bill_from_boot = false;                  // billing starts at machine boot, not at spotvisor's start
  CostValue disk_gb, disk_gb_month;             // persistent/boot disks: size x price per GB-month
  CostValue snapshot_gb, snapshot_gb_month;     // snapshots kept for the run
  CostValue egress_gb, egress_per_gb;           // data sent out over the whole run x price per GB
  CostValue public_ip_hour;                     // public IPv4 address
  CostValue support_month;                      // support plan, prorated per hour
  std::map<std::string, CostValue> other_hour;  // more per-hour items by name
  std::vector<std::string> unknown;             // components that exist but have no price yet
  double budget = 0;                            // stop (exit 3) when the estimate's upper end reaches it; 0 = none
  double warn_fraction = 0.8;                   // warn when the upper end reaches this fraction of budget
  Duration check_interval = std::chrono::seconds(30);  // how often the estimate is recomputed
};

// The priced values of a cost section by key, in the order people read them: the schema,
// --print-config and the run record go through this one list.
struct CostField {
  const char* key;
  CostValue CostSection::*value;
};
inline constexpr CostField kCostFields[] = {
    {"gpu_hour", &CostSection::gpu_hour},
    {"node_hour", &CostSection::node_hour},
    {"disk_gb", &CostSection::disk_gb},
    {"disk_gb_month", &CostSection::disk_gb_month},
    {"snapshot_gb", &CostSection::snapshot_gb},
    {"snapshot_gb_month", &CostSection::snapshot_gb_month},
    {"egress_gb", &CostSection::egress_gb},
    {"egress_per_gb", &CostSection::egress_per_gb},
    {"public_ip_hour", &CostSection::public_ip_hour},
    {"support_month", &CostSection::support_month},
};

// One hook: argv (templates allowed, never a shell) and how long it may run.
struct HookSpec {
  std::vector<std::string> command;            // empty = no hook
  Duration timeout = std::chrono::minutes(5);  // then its process group gets SIGKILL
};

struct HooksSection {
  HookSpec before_start;   // before the first trainer start (e.g. restore data)
  HookSpec on_checkpoint;  // after a new checkpoint passed validation
  HookSpec on_notice;      // a preemption notice arrived
  HookSpec on_finish;      // job done, given up or budget exhausted (upload, power off)
};

struct JobConfig {
  std::optional<std::filesystem::path> source_file;  // the job file, when there is one
  std::filesystem::path base_dir;                    // where relative paths start
  JobSection job;
  ProviderSection provider;
  SignalsSection signals;
  CheckpointsSection checkpoints;
  RestartSection restart;
  CadenceSection cadence;
  HealthSection health;
  TelemetrySection telemetry;
  CostSection cost;
  HooksSection hooks;
  SlurmSection slurm;
  CoordinationSection coordination;
  std::map<std::string, int> key_lines;  // "restart.backoff.max" -> line in source_file
};

}  // namespace spotvisor::config

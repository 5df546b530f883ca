// Whole-config checks that no single key can make: a command exists, templates appear
// only where they can be filled, bounds relate, paths resolve. Messages name the file,
// the line (when the key came from the file) and the key.

#include <csignal>
#include <set>

#include "spotvisor/command/command_line.hpp"
#include "spotvisor/config/loader.hpp"
#include "spotvisor/config/name_pattern.hpp"
#include "spotvisor/config/provider_detect.hpp"
#include "spotvisor/config/signals.hpp"
#include "spotvisor/config/templates.hpp"
#include "spotvisor/http/tls.hpp"
#include "spotvisor/util/host_name.hpp"

namespace spotvisor::config {
namespace {

std::string Where(const JobConfig& job, const std::string& key) {
  if (!job.source_file) return "command line: " + key + ": ";
  const auto it = job.key_lines.find(key);
  if (it == job.key_lines.end()) return job.source_file->string() + ": " + key + ": ";
  return job.source_file->string() + ":" + std::to_string(it->second) + ": " + key + ": ";
}

Status CheckTemplates(const JobConfig& job, const std::vector<std::string>& argv, const std::string& key,
                      const std::set<std::string>& allowed) {
  for (const auto& arg : argv) {
    auto names = TemplateNames(arg);
    if (!names) return Error{Where(job, key) + names.error().message};
    for (const auto& name : *names) {
      if (allowed.count(name) == 0) {
        std::string list;
        for (const auto& a : allowed) list += (list.empty() ? "{" : ", {") + a + "}";
        const bool resume_only = name == "checkpoint" || name == "step";
        return Error{Where(job, key) + "placeholder {" + name + "} cannot be used here" +
                     (resume_only ? " (a fresh start has no checkpoint; use it in job.resume_args)" : "") +
                     " (allowed: " + list + ")"};
      }
    }
  }
  return Ok{};
}

// signals.target: auto signals a launcher's workers (torchrun dies of SIGUSR1 and gives its
// workers 30 s after a SIGTERM), anything else's whole group.
void ChooseSignalTarget(const std::vector<std::string>& command, SignalsSection& s) {
  if (s.target != SignalTarget::kAuto) {
    s.target_why = std::string("signals.target is ") + ToString(s.target);
    return;
  }
  if (auto launcher = command::RecognizeLauncher(command)) {
    s.auto_choice = SignalTarget::kWorkers;
    s.target_why = "auto: " + launcher->name + " is a launcher (" + launcher->evidence + ")";
  } else {
    s.auto_choice = SignalTarget::kGroup;
    s.target_why = "auto: job.command starts no launcher (torchrun, accelerate, deepspeed, mpirun)";
  }
}

// checkpoints.processes: auto takes the launcher's count of processes on this machine; each
// of them writes its share of a checkpoint (framework_layout.cpp requires every share).
void ChooseProcesses(const std::vector<std::string>& command, CheckpointsSection& c) {
  if (c.processes != 0) {
    c.processes_why = "every checkpoint holds the shares of " + std::to_string(c.processes) + " processes";
    return;
  }
  const auto launcher = command::RecognizeLauncher(command);
  if (launcher && launcher->processes > 0) {
    c.auto_processes = launcher->processes;
    c.processes_why = "auto: " + std::to_string(launcher->processes) + " processes (" + launcher->name + " " +
                      launcher->processes_evidence + ")";
  } else {
    c.processes_why = "auto: unknown (" +
                      std::string(launcher ? launcher->name + "'s options do not say how many on this machine"
                                           : "job.command starts no launcher") +
                      "): a share is required only below the highest one present";
  }
}

// The exit code of a resumable stop and the signals that ask for one: what Kubernetes,
// Kubeflow, SLURM and systemd read from them must stay unambiguous.
Status CheckStopContract(const JobConfig& job) {
  const int code = job.job.stop_exit_code;
  if (code < 1 || code > 255) return Error{Where(job, "job.stop_exit_code") + "must be 1..255"};
  if (code == 137) {
    return Error{Where(job, "job.stop_exit_code") +
                 "137 is what SIGKILL (and Kubernetes' OOMKilled) looks like; pick another (e.g. 143 or 200)"};
  }
  for (int own : {1, 3, 64, 73, 78}) {
    if (code == own) {
      return Error{Where(job, "job.stop_exit_code") + std::to_string(code) +
                   " already means something else to spotvisor (1 failed, 3 budget, 64 usage, 73 locked, 78 config)"};
    }
  }
  if (job.signals.stop_on.empty()) {
    return Error{Where(job, "signals.stop_on") + "must name at least one signal (SIGTERM is what a stop usually is)"};
  }
  for (int signo : job.signals.stop_on) {
    if (signo == SIGKILL || signo == SIGSTOP || signo == SIGCHLD || signo == SIGCONT || signo == SIGPIPE) {
      return Error{Where(job, "signals.stop_on") + SignalName(signo) +
                   " cannot mean stop (it cannot be caught, or spotvisor needs it for itself)"};
    }
  }
  return Ok{};
}

// coordination.etcd and coordination.tls: one scheme for all members; for https, TLS files
// that load (read and parsed here, so a wrong file fails the check, not the first request).
Status CheckEtcdUrls(const JobConfig& job) {
  const auto& c = job.coordination;
  std::size_t https = 0;
  for (const auto& url : c.etcd) {
    const bool secure = url.rfind("https://", 0) == 0;
    if ((!secure && url.rfind("http://", 0) != 0) || url.size() <= (secure ? 8U : 7U)) {
      return Error{Where(job, "coordination.etcd") + "'" + url +
                   "' is not an etcd URL such as https://10.0.0.5:2379 or http://10.0.0.5:2379"};
    }
    if (secure) ++https;
  }
  if (https != 0 && https != c.etcd.size()) {
    return Error{Where(job, "coordination.etcd") +
                 "mixes http:// and https:// members; use https:// for all of them (one cluster, one scheme)"};
  }
  if (https == 0) {
    if (c.tls.set()) {
      return Error{Where(job, "coordination.tls") +
                   "is set but the etcd members are http://; write them as https:// (or drop coordination.tls)"};
    }
    return Ok{};
  }
  if (c.tls.cert.has_value() != c.tls.key.has_value()) {
    const std::string given = c.tls.cert ? "cert" : "key";
    const std::string missing = c.tls.cert ? "key" : "cert";
    return Error{Where(job, "coordination.tls." + given) + "needs coordination.tls." + missing +
                 " too: a client certificate and its private key go together"};
  }
  http::TlsFile failed = http::TlsFile::kCa;
  auto loaded = http::LoadTlsFiles({c.tls.ca.value_or(""), c.tls.cert.value_or(""), c.tls.key.value_or("")}, &failed);
  if (!loaded) return Error{Where(job, std::string("coordination.tls.") + ToString(failed)) + loaded.error().message};
  return Ok{};
}

// coordination.min_nodes, shrink_after and grow_wait: how few may train on, after how long,
// and how long a growth waits for a checkpoint.
Status CheckShrinking(JobConfig& job) {
  auto& c = job.coordination;
  if (c.min_nodes == 0) c.min_nodes = c.nodes;
  if (c.min_nodes > c.nodes) {
    return Error{Where(job, "coordination.min_nodes") + std::to_string(c.min_nodes) +
                 " is more than coordination.nodes (" + std::to_string(c.nodes) +
                 "); the group shrinks to min_nodes at the least, and never grows past nodes"};
  }
  if (c.grow_wait <= Duration::zero()) return Error{Where(job, "coordination.grow_wait") + "must be longer than 0"};
  if (c.min_nodes == c.nodes) return Ok{};
  if (c.shrink_after <= Duration::zero())
    return Error{Where(job, "coordination.shrink_after") + "must be longer than 0"};
  if (c.shrink_after >= c.join_timeout) {
    return Error{Where(job, "coordination.shrink_after") + FormatDuration(c.shrink_after) +
                 " is not shorter than coordination.join_timeout (" + FormatDuration(c.join_timeout) +
                 "): the nodes would give up waiting before the group could shrink"};
  }
  return Ok{};
}

// coordination: the etcd members, the group's size and this node's place in it.
Status CheckCoordination(JobConfig& job) {
  auto& c = job.coordination;
  if (Status s = CheckShrinking(job); !s) return s;
  if (!c.enabled()) {
    if (c.nodes > 1) {
      return Error{Where(job, "coordination.nodes") +
                   "a group of several nodes needs coordination.etcd (the etcd members the nodes agree through)"};
    }
    if (c.spares > 0) {
      return Error{Where(job, "coordination.spares") +
                   "spares wait in a group: they need coordination.etcd (the etcd members the nodes agree through)"};
    }
    return Ok{};
  }
  if (c.spares > 0 && c.node_rank != kAutoRank) {
    return Error{Where(job, "coordination.node_rank") +
                 "must be auto with coordination.spares: a spare takes whichever rank is lost"};
  }
  if (Status s = CheckEtcdUrls(job); !s) return s;
  if (c.node_rank != kAutoRank && c.node_rank >= c.nodes) {
    return Error{Where(job, "coordination.node_rank") + std::to_string(c.node_rank) +
                 " is not below coordination.nodes (" + std::to_string(c.nodes) + "); ranks are 0.." +
                 std::to_string(c.nodes - 1) + " or auto"};
  }
  if (c.lease_ttl < std::chrono::seconds(2) || c.lease_ttl % std::chrono::seconds(1) != Duration::zero()) {
    return Error{Where(job, "coordination.lease_ttl") +
                 "must be whole seconds, at least 2s (etcd leases count seconds)"};
  }
  if (c.join_timeout <= Duration::zero())
    return Error{Where(job, "coordination.join_timeout") + "must be longer than 0"};
  if (c.advertise.empty()) c.advertise = util::CanonicalHostName();
  if (c.advertise.empty()) c.advertise = "127.0.0.1";
  return Ok{};
}

// job.command, job.name, job.workdir; with `need_command`, the program must be there.
Status CheckJobSection(JobConfig& job, bool need_command) {
  if (job.job.command.empty()) {
    return Error{Where(job, "job.command") +
                 "no command to run (set job.command: [\"/usr/bin/python3\", \"train.py\"] or pass it after --)"};
  }
  if (job.job.name.empty()) job.job.name = "job";
  if (job.job.name.find('/') != std::string::npos || job.job.name == "." || job.job.name == "..") {
    return Error{Where(job, "job.name") + "'" + job.job.name + "' must not contain '/'"};
  }
  if (job.job.workdir.empty()) job.job.workdir = job.base_dir;
  job.job.workdir = std::filesystem::absolute(job.job.workdir).lexically_normal();
  std::error_code ec;
  if (!std::filesystem::is_directory(job.job.workdir, ec)) {
    return Error{Where(job, "job.workdir") + job.job.workdir.string() + " is not a directory"};
  }

  const std::string& program = job.job.command.front();
  if (need_command && program.find('{') == std::string::npos) {
    if (auto exe = command::ResolveExecutable(program, job.job.workdir); !exe) {
      return Error{Where(job, "job.command") + exe.error().message};
    }
  }
  return Ok{};
}

// The placeholders each list may use: the group's place everywhere (one node alone is rank
// 0 of 1, its own master), the checkpoint in the resume arguments only.
Status CheckPlaceholders(const JobConfig& job) {
  std::set<std::string> anywhere{"attempt", "job", "node_rank", "nnodes", "master_addr", "master_port", "epoch"};
  if (job.checkpoints.dir) anywhere.insert("checkpoint_dir");
  if (job.job.result_file) anywhere.insert("result_file");
  std::set<std::string> resume = anywhere;
  resume.insert({"checkpoint", "step"});
  if (Status s = CheckTemplates(job, job.job.command, "job.command", anywhere); !s) return s;
  if (Status s = CheckTemplates(job, job.job.resume_args, "job.resume_args", resume); !s) return s;
  if (!job.job.resume_args.empty() && !job.checkpoints.dir) {
    return Error{Where(job, "job.resume_args") +
                 "set checkpoints.dir too: resume arguments need a checkpoint to point at"};
  }
  return Ok{};
}

// One place to mirror to, and a remote rclone can parse (`name:path`).
Status CheckMirror(const JobConfig& job) {
  const auto& m = job.checkpoints.mirror;
  const int forms = (m.path ? 1 : 0) + (m.command.empty() ? 0 : 1) + (m.remote ? 1 : 0);
  if (forms > 1) {
    return Error{Where(job, "checkpoints.mirror") + "set one of path, command and remote (" + std::to_string(forms) +
                 " are set)"};
  }
  if (forms == 1 && !job.checkpoints.dir) {
    return Error{Where(job, "checkpoints.mirror") + "set checkpoints.dir too: the mirror copies what is saved there"};
  }
  if (m.remote && (m.remote->find(':') == std::string::npos || m.remote->front() == '-')) {
    return Error{Where(job, "checkpoints.mirror.remote") + "'" + *m.remote +
                 "' is not an rclone remote: write remote:bucket/prefix (e.g. s3:my-bucket/jobs), "
                 "with the remote set up in rclone's config or RCLONE_CONFIG_* variables"};
  }
  if (!m.rclone_flags.empty() && !m.remote) {
    return Error{Where(job, "checkpoints.mirror.rclone_flags") +
                 "only the remote form runs rclone itself: set "
                 "checkpoints.mirror.remote"};
  }
  return Ok{};
}

// checkpoints.pattern and .dir, restart.backoff, checkpoints.content against .validate, the
// signals a trainer must be able to catch.
Status CheckBounds(const JobConfig& job) {
  std::error_code ec;
  if (auto p = config::NamePattern::Parse(job.checkpoints.pattern); !p) {
    return Error{Where(job, "checkpoints.pattern") + p.error().message};
  }
  if (job.checkpoints.dir && std::filesystem::exists(*job.checkpoints.dir, ec) &&
      !std::filesystem::is_directory(*job.checkpoints.dir, ec)) {
    return Error{Where(job, "checkpoints.dir") + job.checkpoints.dir->string() + " exists and is not a directory"};
  }
  const auto& b = job.restart.backoff;
  if (b.initial > b.max) {
    return Error{Where(job, "restart.backoff.initial") + FormatDuration(b.initial) +
                 " is larger than restart.backoff.max (" + FormatDuration(b.max) + ")"};
  }
  if (b.multiplier < 1.0) return Error{Where(job, "restart.backoff.multiplier") + "must be >= 1"};
  if (job.checkpoints.content == ContentCheck::kFinite && job.checkpoints.validate == ValidateLevel::kStructure) {
    return Error{Where(job, "checkpoints.content") +
                 "finite reads every tensor, which checkpoints.validate: structure never does: "
                 "use validate: format or full"};
  }
  for (auto [signo, key] : {std::pair{job.signals.on_notice, "signals.on_notice"},
                            std::pair{job.signals.checkpoint, "signals.checkpoint"}}) {
    if (signo == SIGKILL || signo == SIGSTOP) {
      return Error{Where(job, key) +
                   "SIGKILL and SIGSTOP cannot be caught, so a trainer could never checkpoint on them"};
    }
  }
  return Ok{};
}

}  // namespace

Status Finalize(JobConfig& job, bool need_command) {
  if (Status s = CheckJobSection(job, need_command); !s) return s;
  if (Status s = CheckCoordination(job); !s) return s;
  if (Status s = CheckPlaceholders(job); !s) return s;
  if (Status s = CheckBounds(job); !s) return s;
  if (Status s = CheckMirror(job); !s) return s;
  if (Status s = CheckStopContract(job); !s) return s.error();
  ChooseSignalTarget(job.job.command, job.signals);
  ChooseProcesses(job.job.command, job.checkpoints);
  ResolveProvider(job.provider);
  if (job.telemetry.state_dir.empty()) job.telemetry.state_dir = job.base_dir / ".spotvisor" / job.job.name;
  std::error_code ec;
  if (std::filesystem::exists(job.telemetry.state_dir, ec) &&
      !std::filesystem::is_directory(job.telemetry.state_dir, ec)) {
    return Error{Where(job, "telemetry.state_dir") + job.telemetry.state_dir.string() +
                 " exists and is not a directory"};
  }
  if (job.health.hang_timeout.count() <= 0) {
    return Error{Where(job, "health.hang_timeout") + "must be longer than 0"};
  }
  return Ok{};
}

}  // namespace spotvisor::config

// spotvisor inside a SLURM job (see slurm.hpp): the environment it reads, the truncation
// warning, and the requeue after a resumable stop. The observer runs on the io thread;
// only OnExit blocks (scontrol, at most kRequeueTimeout).
#include "spotvisor/platform/slurm.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>

#include "spotvisor/config/signals.hpp"
#include "spotvisor/log/log.hpp"
#include "spotvisor/process/blocking_command.hpp"

namespace spotvisor::platform {
namespace {

using log::Log;
using log::LogLevel;
using log::Quote;

constexpr auto kRequeueTimeout = std::chrono::seconds(30);

std::optional<bool> StdoutAppends() {
  struct stat st {};
  if (fstat(STDOUT_FILENO, &st) != 0 || !S_ISREG(st.st_mode)) return std::nullopt;
  const int flags = fcntl(STDOUT_FILENO, F_GETFL);
  if (flags < 0) return std::nullopt;
  return (flags & O_APPEND) != 0;
}

class SlurmObserver final : public supervisor::RunObserver {
 public:
  SlurmObserver(const config::JobConfig& job, SlurmJob slurm) : job_(job), slurm_(std::move(slurm)) {}

  void OnStart(supervisor::RunControl& control) override {
    control_ = &control;
    Log(LogLevel::kInfo, "event=slurm_job job_id=" + Quote(slurm_.job_id) + " restart_count=" +
                             (slurm_.restart_count ? std::to_string(*slurm_.restart_count) : std::string("0")) +
                             " requeue_on=" + Quote(RequeueOnText()));
    const std::string why = TruncationWarning(slurm_, StdoutAppends());
    if (!why.empty()) Log(LogLevel::kWarning, "event=slurm_output_truncated_on_requeue detail=" + Quote(why));
  }

  void OnStopSignal(int signo) override {
    if (!cause_) cause_ = signo;
  }
  void OnNotice(const preemption::Notice& notice) override {
    if (!cause_ && notice.action == preemption::NoticeAction::kStop) cause_ = config::kRequeueOnNotice;
  }

  void OnExit(int code, const std::string&) override {
    if (code != job_.job.stop_exit_code || !cause_) return;
    const auto& on = job_.slurm.requeue_on;
    const std::string cause = *cause_ == config::kRequeueOnNotice ? "notice" : config::SignalName(*cause_);
    if (std::find(on.begin(), on.end(), *cause_) == on.end()) {
      Log(LogLevel::kInfo, "event=slurm_requeue_skipped job_id=" + Quote(slurm_.job_id) + " cause=" + cause +
                               " detail=\"not in slurm.requeue_on: SLURM's own requeue (preemption, node failure) "
                               "or a user's resubmission must restart it\"");
      return;
    }
    if (control_ == nullptr) return;
    process::CommandSpec spec;
    spec.argv = {job_.slurm.scontrol, "requeue", slurm_.job_id};
    spec.workdir = job_.job.workdir;
    spec.timeout = kRequeueTimeout;
    spec.die_with_parent = false;  // the requeue is the job's last word: let it land
    // The waiting thread reaps through the child table itself: no deadlock on the io thread.
    const auto outcome = process::RunCommand(control_->children(), spec);
    if (!outcome.ok()) {
      const std::string error = outcome.end == process::CommandEnd::kSpawnFailed
                                    ? outcome.error
                                    : spec.argv.front() + " requeue: " + outcome.Describe();
      Log(LogLevel::kError, "event=slurm_requeue_failed job_id=" + Quote(slurm_.job_id) + " cause=" + cause +
                                " error=" + Quote(error) + " detail=\"the job ends with exit code " +
                                std::to_string(code) + "; list it in the cluster's RequeueExit or requeue by hand\"");
      return;
    }
    Log(LogLevel::kInfo, "event=slurm_requeued job_id=" + Quote(slurm_.job_id) + " cause=" + cause);
  }

 private:
  std::string RequeueOnText() const {
    std::string out;
    for (int s : job_.slurm.requeue_on) {
      if (!out.empty()) out += ',';
      out += s == config::kRequeueOnNotice ? std::string("notice") : config::SignalName(s);
    }
    return out;
  }

  const config::JobConfig& job_;  // not owned
  SlurmJob slurm_;
  std::optional<int> cause_;                   // the first stop's cause: a signal, or kRequeueOnNotice
  supervisor::RunControl* control_ = nullptr;  // from OnStart; the run outlives us
};

}  // namespace

std::optional<SlurmJob> SlurmJobFrom(const std::map<std::string, std::string>& env) {
  const auto id = env.find("SLURM_JOB_ID");
  if (id == env.end() || id->second.empty()) return std::nullopt;
  SlurmJob job;
  job.job_id = id->second;
  if (const auto it = env.find("SLURM_RESTART_COUNT"); it != env.end()) {
    char* end = nullptr;
    const long n = std::strtol(it->second.c_str(), &end, 10);
    if (end != it->second.c_str() && *end == '\0' && n >= 0 && n < 1000000) job.restart_count = static_cast<int>(n);
  }
  if (const auto it = env.find("SLURM_OPEN_MODE"); it != env.end()) job.open_mode = it->second;
  return job;
}

std::optional<SlurmJob> CurrentSlurmJob() {
  std::map<std::string, std::string> env;
  for (const char* name : {"SLURM_JOB_ID", "SLURM_RESTART_COUNT", "SLURM_OPEN_MODE"}) {
    if (const char* v = std::getenv(name)) env[name] = v;
  }
  return SlurmJobFrom(env);
}

std::string TruncationWarning(const SlurmJob& job, std::optional<bool> stdout_append) {
  if (stdout_append) {
    if (*stdout_append) return "";
    return "stdout is a file opened without O_APPEND: a requeue of job " + job.job_id +
           " truncates it and the log of earlier attempts is lost; submit with --open-mode=append";
  }
  if (job.open_mode == "a" || job.open_mode == "append") return "";
  return "job " + job.job_id +
         " was not submitted with --open-mode=append (SLURM_OPEN_MODE is not 'a'): a requeue "
         "truncates its output file and the log of earlier attempts is lost, unless the cluster sets JobFileAppend=1";
}

std::unique_ptr<supervisor::RunObserver> MakeSlurmObserver(const config::JobConfig& job) {
  auto slurm = CurrentSlurmJob();
  if (!slurm) return nullptr;
  return std::make_unique<SlurmObserver>(job, std::move(*slurm));
}

}  // namespace spotvisor::platform

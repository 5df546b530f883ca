// Signal delivery to the trainer; see trainer_signals.hpp.
#include "trainer_signals.hpp"

#include <csignal>

#include "spotvisor/process/launcher.hpp"
#include "spotvisor/process/process_group.hpp"

namespace spotvisor::supervisor {

std::size_t TrainerSignals::Send(int signo, config::SignalTarget to, bool only_to_handlers) {
  last_.clear();
  skipped_ = 0;
  switch (to) {
    case config::SignalTarget::kMain:
      if (process::SignalProcess(leader_, signo)) last_.push_back(leader_);
      break;
    case config::SignalTarget::kWorkers:
      for (pid_t pid : process::FindWorkers(leader_).workers) {
        if (only_to_handlers && !process::CatchesSignal(pid, signo)) {
          ++skipped_;
        } else if (process::SignalProcess(pid, signo)) {
          last_.push_back(pid);
        }
      }
      break;
    case config::SignalTarget::kAuto:  // resolved by config::Finalize; the group is the safe reading
    case config::SignalTarget::kGroup: {
      auto members = process::GroupMembers(leader_);
      if (process::SignalGroup(leader_, signo)) last_ = std::move(members);
      break;
    }
  }
  return last_.size();
}

std::size_t TrainerSignals::KillGroup() {
  const auto members = process::GroupMembers(leader_);
  killed_.clear();
  for (pid_t pid : members) killed_ += (killed_.empty() ? "" : ", ") + process::DescribeProcess(pid);
  process::SignalGroup(leader_, SIGKILL);
  held_.clear();
  return members.size();
}

std::size_t TrainerSignals::HoldLaunchers() {
  for (pid_t pid : process::FindWorkers(leader_).launchers) {
    if (process::SignalProcess(pid, SIGSTOP)) held_.push_back(pid);
  }
  return held_.size();
}

std::size_t TrainerSignals::ReleaseLaunchers(int signo) {
  const std::size_t n = held_.size();
  for (pid_t pid : held_) {
    process::SignalProcess(pid, signo);  // pending until it runs again
    process::SignalProcess(pid, SIGCONT);
  }
  held_.clear();
  return n;
}

bool TrainerSignals::WorkersGone() const { return process::FindWorkers(leader_).workers.empty(); }

std::string TrainerSignals::LastPids() const {
  std::string out;
  for (pid_t pid : last_) out += (out.empty() ? "" : ",") + std::to_string(pid);
  return out;
}

}  // namespace spotvisor::supervisor

// Signal delivery to the trainer; see trainer_signals.hpp.
#include "trainer_signals.hpp"

#include <algorithm>
#include <csignal>

#include "spotvisor/process/launcher.hpp"
#include "spotvisor/process/process_group.hpp"

namespace spotvisor::supervisor {

std::vector<pid_t> TrainerSignals::Targets(config::SignalTarget to) const {
  switch (to) {
    case config::SignalTarget::kMain:
      return {leader_};
    case config::SignalTarget::kWorkers:
      return process::FindWorkers(leader_).workers;
    case config::SignalTarget::kAuto:  // resolved by config::Finalize; the group is the safe reading
    case config::SignalTarget::kGroup:
      break;
  }
  return process::GroupMembers(leader_);
}

std::size_t TrainerSignals::Send(int signo, config::SignalTarget to, bool only_to_handlers) {
  last_.clear();
  skipped_ = 0;
  const bool whole_group = to == config::SignalTarget::kGroup || to == config::SignalTarget::kAuto;
  if (whole_group && !only_to_handlers) {
    // One kill(-pgid): a member forked meanwhile gets it too.
    const auto members = process::GroupMembers(leader_);
    if (process::SignalGroup(leader_, signo)) last_ = members;
    return last_.size();
  }
  // One by one, so that a process without a handler (the default action would end it) is
  // left out: "checkpoint now" must never kill.
  for (pid_t pid : Targets(to)) {
    if (only_to_handlers && !process::CatchesSignal(pid, signo)) {
      ++skipped_;
    } else if (process::SignalProcess(pid, signo)) {
      last_.push_back(pid);
    }
  }
  return last_.size();
}

std::size_t TrainerSignals::Catchers(int signo, config::SignalTarget to) const {
  std::size_t n = 0;
  for (pid_t pid : Targets(to)) n += process::CatchesSignal(pid, signo) ? 1 : 0;
  return n;
}

std::size_t TrainerSignals::KillGroup() {
  const auto members = process::GroupMembers(leader_);
  // torch >= 2's torchrun starts every worker in a session of its own (start_new_session):
  // the group's SIGKILL misses them, and with their launcher dead they would be nobody's
  // (no PDEATHSIG). So the launcher tree is walked first, while the workers are its children,
  // and each one outside the group gets SIGKILL too (its own group where it leads one: its
  // DataLoader workers and compilers with it).
  std::vector<pid_t> outside;
  for (pid_t pid : process::FindWorkers(leader_).workers) {
    if (std::ranges::find(members, pid) == members.end()) outside.push_back(pid);
  }
  killed_.clear();
  for (pid_t pid : members) killed_ += (killed_.empty() ? "" : ", ") + process::DescribeProcess(pid);
  for (pid_t pid : outside) killed_ += (killed_.empty() ? "" : ", ") + process::DescribeProcess(pid);
  process::SignalGroup(leader_, SIGKILL);
  for (pid_t pid : outside) {
    const auto stat = process::ReadProcStat(pid);
    if (stat && stat->pgrp == pid) {
      process::SignalGroup(pid, SIGKILL);
    } else {
      process::SignalProcess(pid, SIGKILL);
    }
  }
  held_.clear();
  return members.size() + outside.size();
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
    if (signo != 0) process::SignalProcess(pid, signo);  // pending until it runs again
    process::SignalProcess(pid, SIGCONT);
  }
  held_.clear();
  return n;
}

std::size_t TrainerSignals::Pause(bool on) {
  auto pids = process::GroupMembers(leader_);
  for (pid_t worker : process::FindWorkers(leader_).workers) {
    if (std::find(pids.begin(), pids.end(), worker) == pids.end()) pids.push_back(worker);
  }
  std::size_t n = 0;
  for (pid_t pid : pids) {
    if (std::find(held_.begin(), held_.end(), pid) != held_.end()) continue;
    n += process::SignalProcess(pid, on ? SIGSTOP : SIGCONT) ? 1 : 0;
  }
  return n;
}

bool TrainerSignals::WorkersGone() const { return process::FindWorkers(leader_).workers.empty(); }

WorkersActivity TrainerSignals::Workers() const {
  WorkersActivity out;
  const auto workers = process::FindWorkers(leader_).workers;
  out.all_in_socket_waits = !workers.empty();
  for (pid_t pid : workers) {
    if (auto stat = process::ReadProcStat(pid)) out.cpu_ticks += stat->cpu_ticks;
    const std::string wchan = process::WaitChannel(pid);
    const bool socket_wait =
        wchan == "wait_woken" || wchan.find("sk_wait") != std::string::npos || wchan.find("poll") != std::string::npos;
    out.all_in_socket_waits = out.all_in_socket_waits && socket_wait;
  }
  return out;
}

std::string TrainerSignals::LastPids() const {
  std::string out;
  for (pid_t pid : last_) out += (out.empty() ? "" : ",") + std::to_string(pid);
  return out;
}

}  // namespace spotvisor::supervisor

// /proc and kill(2) readings; see process_group.hpp.
#include "spotvisor/process/process_group.hpp"

#include <dirent.h>
#include <signal.h>

#include <cerrno>
#include <cstdlib>
#include <fstream>
#include <sstream>

namespace spotvisor::process {
namespace {

// Fields of /proc/<pid>/stat after the command name: state is field 3.
struct Stat {
  char state = '?';
  pid_t pgrp = 0;
  std::uint64_t start_ticks = 0;
};

std::optional<Stat> ReadStat(pid_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/stat");
  std::string line;
  if (!in || !std::getline(in, line)) return std::nullopt;
  const auto close = line.rfind(')');
  if (close == std::string::npos) return std::nullopt;
  std::istringstream rest(line.substr(close + 2));
  Stat s;
  std::string skip;
  pid_t ppid = 0;
  rest >> s.state >> ppid >> s.pgrp;
  for (int field = 6; field < 22 && rest; ++field) rest >> skip;  // fields 6..21
  rest >> s.start_ticks;
  if (!rest) return std::nullopt;
  return s;
}

}  // namespace

bool SignalGroup(pid_t pgid, int signo) { return pgid > 1 && kill(-pgid, signo) == 0; }
bool SignalProcess(pid_t pid, int signo) { return pid > 1 && kill(pid, signo) == 0; }

bool GroupExists(pid_t pgid) {
  if (pgid <= 1) return false;
  return kill(-pgid, 0) == 0 || errno == EPERM;
}

std::optional<std::uint64_t> StartTicks(pid_t pid) {
  auto s = ReadStat(pid);
  if (!s) return std::nullopt;
  return s->start_ticks;
}

std::string BootId() {
  std::ifstream in("/proc/sys/kernel/random/boot_id");
  std::string id;
  std::getline(in, id);
  return id;
}

ChildIdentity Identify(pid_t pid) {
  return ChildIdentity{pid, StartTicks(pid).value_or(0), BootId()};
}

std::vector<pid_t> FindLeftovers(const ChildIdentity& child) {
  std::vector<pid_t> found;
  if (child.pid <= 1 || child.boot_id != BootId()) return found;
  if (auto leader = ReadStat(child.pid); leader && leader->pgrp == child.pid &&
                                         leader->start_ticks != child.start_ticks) {
    return found;  // the pid was reused by a new group leader: not ours
  }
  DIR* proc = opendir("/proc");
  if (proc == nullptr) return found;
  while (dirent* entry = readdir(proc)) {
    char* end = nullptr;
    const long pid = std::strtol(entry->d_name, &end, 10);
    if (end == entry->d_name || *end != '\0') continue;
    auto s = ReadStat(static_cast<pid_t>(pid));
    if (s && s->pgrp == child.pid && s->state != 'Z' && s->start_ticks >= child.start_ticks) {
      found.push_back(static_cast<pid_t>(pid));
    }
  }
  closedir(proc);
  return found;
}

}  // namespace spotvisor::process

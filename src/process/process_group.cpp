// /proc and kill(2) readings; see process_group.hpp.
#include "spotvisor/process/process_group.hpp"

#include <dirent.h>
#include <fcntl.h>
#include <signal.h>

#include <cerrno>
#include <cstdlib>
#include <fstream>
#include <map>
#include <sstream>

namespace spotvisor::process {

std::optional<ProcStat> ReadProcStat(pid_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/stat");
  std::string line;
  if (!in || !std::getline(in, line)) return std::nullopt;
  const auto close = line.rfind(')');  // the command name may hold spaces and parentheses
  if (close == std::string::npos || close + 2 >= line.size()) return std::nullopt;
  std::istringstream rest(line.substr(close + 2));
  ProcStat s;
  std::string skip;
  rest >> s.state >> s.ppid >> s.pgrp;
  for (int field = 6; field < 14 && rest; ++field) rest >> skip;  // fields 6..13
  std::uint64_t utime = 0, stime = 0;
  rest >> utime >> stime;
  s.cpu_ticks = utime + stime;
  for (int field = 16; field < 22 && rest; ++field) rest >> skip;  // fields 16..21
  rest >> s.start_ticks;
  if (!rest) return std::nullopt;
  return s;
}

std::vector<pid_t> AllPids() {
  std::vector<pid_t> pids;
  DIR* proc = opendir("/proc");
  if (proc == nullptr) return pids;
  while (dirent* entry = readdir(proc)) {
    char* end = nullptr;
    const long pid = std::strtol(entry->d_name, &end, 10);
    if (end != entry->d_name && *end == '\0') pids.push_back(static_cast<pid_t>(pid));
  }
  closedir(proc);
  return pids;
}

bool SignalGroup(pid_t pgid, int signo) { return pgid > 1 && kill(-pgid, signo) == 0; }
bool SignalProcess(pid_t pid, int signo) { return pid > 1 && kill(pid, signo) == 0; }

bool GroupExists(pid_t pgid) {
  if (pgid <= 1) return false;
  return kill(-pgid, 0) == 0 || errno == EPERM;
}

std::optional<std::uint64_t> StartTicks(pid_t pid) {
  auto s = ReadProcStat(pid);
  if (!s) return std::nullopt;
  return s->start_ticks;
}

namespace {
std::string FirstLine(const std::string& path) {
  std::ifstream in(path);
  std::string line;
  std::getline(in, line);
  return line;
}
}  // namespace

std::string WaitChannel(pid_t pid) {
  // wchan reads "0" where the kernel hides it, and nothing for a running process.
  std::string wchan = FirstLine("/proc/" + std::to_string(pid) + "/wchan");
  return wchan == "0" ? std::string() : wchan;
}

std::string DescribeProcess(pid_t pid) {
  const auto stat = ReadProcStat(pid);
  if (!stat) return std::to_string(pid) + " gone";
  std::string out = std::to_string(pid) + " " + FirstLine("/proc/" + std::to_string(pid) + "/comm") + " " + stat->state;
  if (const std::string wchan = WaitChannel(pid); !wchan.empty()) out += " " + wchan;
  return out;
}

std::string BootId() {
  std::ifstream in("/proc/sys/kernel/random/boot_id");
  std::string id;
  std::getline(in, id);
  return id;
}

ChildIdentity Identify(pid_t pid) { return ChildIdentity{pid, StartTicks(pid).value_or(0), BootId()}; }

namespace {

// Live processes of group `pgid` that started at or after `since` (clock ticks since boot).
std::vector<pid_t> LiveMembers(pid_t pgid, std::uint64_t since) {
  std::vector<pid_t> found;
  if (pgid <= 1) return found;
  for (pid_t pid : AllPids()) {
    auto s = ReadProcStat(pid);
    if (s && s->pgrp == pgid && s->state != 'Z' && s->start_ticks >= since) found.push_back(pid);
  }
  return found;
}

// The flags of an open file description, from /proc/<pid>/fdinfo/<fd> ("flags:\t0100001", octal).
std::optional<int> FdFlags(const std::string& fdinfo) {
  std::ifstream in(fdinfo);
  std::string key;
  while (in >> key) {
    if (key == "flags:") {
      std::string octal;
      in >> octal;
      char* end = nullptr;
      const long flags = std::strtol(octal.c_str(), &end, 8);
      if (end == octal.c_str()) return std::nullopt;
      return static_cast<int>(flags);
    }
    std::string rest;
    std::getline(in, rest);
  }
  return std::nullopt;
}

}  // namespace

std::vector<pid_t> GroupMembers(pid_t pgid) { return LiveMembers(pgid, 0); }

std::set<std::filesystem::path> OpenForWriting(pid_t pgid, const std::filesystem::path& dir) {
  namespace fs = std::filesystem;
  std::set<fs::path> open;
  std::error_code ec;
  const fs::path root = fs::weakly_canonical(dir, ec);
  if (ec || pgid <= 1) return open;
  const std::string prefix = root.string() + "/";
  // The group's processes and the leader's descendants (a launcher may start its ranks in
  // sessions of their own).
  std::map<pid_t, ProcStat> stats;
  for (pid_t pid : AllPids()) {
    if (auto st = ReadProcStat(pid); st && st->state != 'Z') stats.emplace(pid, *st);
  }
  std::vector<pid_t> pids;
  for (const auto& [pid, st] : stats) {
    bool ours = st.pgrp == pgid || pid == pgid;
    pid_t up = st.ppid;
    for (int depth = 0; !ours && up > 1 && depth < 64; ++depth) {  // bounded: /proc changes as it is read
      ours = up == pgid;
      const auto parent = stats.find(up);
      up = parent == stats.end() ? 0 : parent->second.ppid;
    }
    if (ours) pids.push_back(pid);
  }
  for (pid_t pid : pids) {
    const std::string proc = "/proc/" + std::to_string(pid);
    for (fs::directory_iterator it(proc + "/fd", ec), end; !ec && it != end; it.increment(ec)) {
      const fs::path target = fs::read_symlink(it->path(), ec);
      if (ec) {
        ec.clear();
        continue;
      }
      if (target.string().rfind(prefix, 0) != 0) continue;
      const auto flags = FdFlags(proc + "/fdinfo/" + it->path().filename().string());
      if (flags && (*flags & O_ACCMODE) != O_RDONLY) open.insert(target);
    }
    ec.clear();
  }
  return open;
}

std::vector<pid_t> FindLeftovers(const ChildIdentity& child) {
  if (child.pid <= 1 || child.boot_id != BootId()) return {};
  if (auto leader = ReadProcStat(child.pid);
      leader && leader->pgrp == child.pid && leader->start_ticks != child.start_ticks) {
    return {};  // the pid was reused by a new group leader: not ours
  }
  return LiveMembers(child.pid, child.start_ticks);
}

}  // namespace spotvisor::process

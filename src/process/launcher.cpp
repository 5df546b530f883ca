// The /proc walk to a launcher's workers; see launcher.hpp.
#include "spotvisor/process/launcher.hpp"

#include <fstream>
#include <iterator>
#include <map>
#include <set>

#include "spotvisor/command/command_line.hpp"
#include "spotvisor/process/process_group.hpp"

namespace spotvisor::process {

bool CatchesSignal(pid_t pid, int signo) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/status");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("SigCgt:", 0) != 0) continue;
    const unsigned long long mask = std::stoull(line.substr(7), nullptr, 16);
    return signo >= 1 && signo <= 64 && ((mask >> (signo - 1)) & 1ULL) != 0;
  }
  return false;
}

std::vector<std::string> CommandLine(pid_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/cmdline", std::ios::binary);
  const std::string raw((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  std::vector<std::string> argv;
  std::size_t start = 0;
  while (start < raw.size()) {
    const auto nul = raw.find('\0', start);
    argv.push_back(raw.substr(start, nul == std::string::npos ? std::string::npos : nul - start));
    if (nul == std::string::npos) break;
    start = nul + 1;
  }
  return argv;
}

LauncherTree FindWorkers(pid_t root) {
  LauncherTree tree;
  const auto top = ReadProcStat(root);
  if (root <= 1 || !top || top->state == 'Z') return tree;
  std::multimap<pid_t, pid_t> children;  // parent -> live child, from one pass over /proc
  for (pid_t pid : AllPids()) {
    if (auto s = ReadProcStat(pid); s && s->state != 'Z') children.emplace(s->ppid, pid);
  }
  std::vector<pid_t> walk{root};
  std::set<pid_t> seen{root};
  while (!walk.empty()) {
    const pid_t launcher = walk.back();
    walk.pop_back();
    tree.launchers.push_back(launcher);
    const auto [begin, end] = children.equal_range(launcher);
    for (auto c = begin; c != end; ++c) {
      if (!seen.insert(c->second).second) continue;
      if (command::RecognizeLauncher(CommandLine(c->second))) {
        walk.push_back(c->second);
      } else {
        tree.workers.push_back(c->second);
      }
    }
  }
  return tree;
}

}  // namespace spotvisor::process

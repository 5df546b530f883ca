// A command line's launcher and its program; see command_line.hpp.
#include "spotvisor/command/command_line.hpp"

#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <map>
#include <set>

namespace spotvisor::command {
namespace {

std::string Base(const std::string& path) { return std::filesystem::path(path).filename().string(); }

bool IsPython(const std::string& base) {
  // python, python3, python3.11, pypy3: what users put in front of a launcher module or script.
  for (const char* prefix : {"python", "pypy"}) {
    const std::string p(prefix);
    if (base.rfind(p, 0) != 0) continue;
    const std::string rest = base.substr(p.size());
    if (rest.find_first_not_of("0123456789.") == std::string::npos) return true;
  }
  return false;
}

// Launchers by the module `python -m` runs.
std::optional<std::string> LauncherModule(const std::string& module) {
  static const std::map<std::string, std::string> kModules{{"torch.distributed.run", "torchrun"},
                                                           {"torch.distributed.launch", "torchrun"},
                                                           {"accelerate.commands.launch", "accelerate"},
                                                           {"deepspeed.launcher.runner", "deepspeed"},
                                                           {"deepspeed.launcher.launch", "deepspeed"}};
  const auto it = kModules.find(module);
  if (it == kModules.end()) return std::nullopt;
  return it->second;
}

// Launchers by their program (or script) name; `next` is the argument after it.
std::optional<std::string> LauncherProgram(const std::string& base, const std::string& next) {
  if (base == "torchrun") return "torchrun";
  if (base == "deepspeed") return "deepspeed";
  if (base == "mpirun" || base == "mpiexec" || base == "orterun") return "mpirun";
  if (base == "accelerate-launch" || (base == "accelerate" && next == "launch")) return "accelerate";
  return std::nullopt;
}

// Python's options that take a value in the next argument (or glued: -Xdev).
bool TakesValue(char option) { return option == 'X' || option == 'W' || option == 'Q'; }

// The launcher's long options from argv[from] up to its script (the first argument ending
// in .py, or the module after -m/--module): name (dashes as underscores) -> value, first
// occurrence; a flag's value is "". Only `wanted` are read: which other options take a value
// is the launcher's business, so a value such as `no` in `--mixed_precision no` is skipped
// as an unknown positional.
std::map<std::string, std::string> LongOptions(const std::vector<std::string>& argv, std::size_t from,
                                               const std::set<std::string>& wanted,
                                               const std::set<std::string>& flags) {
  std::map<std::string, std::string> out;
  for (std::size_t k = from; k < argv.size(); ++k) {
    const std::string& a = argv[k];
    if (a == "--" || a.ends_with(".py")) break;
    if (a == "-m" || a == "--module") break;
    if (!a.starts_with("--")) continue;
    const auto eq = a.find('=');
    std::string name = a.substr(2, eq == std::string::npos ? std::string::npos : eq - 2);
    std::replace(name.begin(), name.end(), '-', '_');
    if (flags.count(name)) {
      out.emplace(name, "");
    } else if (wanted.count(name)) {
      if (eq != std::string::npos) {
        out.emplace(name, a.substr(eq + 1));
      } else if (k + 1 < argv.size()) {
        out.emplace(name, argv[++k]);
      }
    }
  }
  return out;
}

// A whole positive count (no sign, no placeholder), else 0.
int Count(const std::string& text) {
  if (text.empty() || text.size() > 6 || text.find_first_not_of("0123456789") != std::string::npos) return 0;
  return std::stoi(text);
}

// Launcher::processes from the options after argv[from] (see launcher.hpp).
void ReadProcesses(const std::vector<std::string>& argv, std::size_t from, Launcher& l) {
  if (l.name == "torchrun") {
    const auto o = LongOptions(argv, from, {"nproc_per_node", "nnodes"}, {"standalone"});
    const auto nproc = o.find("nproc_per_node");
    const auto nnodes = o.find("nnodes");
    const bool one_node =
        o.count("standalone") || nnodes == o.end() || nnodes->second == "1" || nnodes->second == "1:1";
    if (nproc != o.end() && one_node && Count(nproc->second) > 0) {
      l.processes = Count(nproc->second);
      l.processes_evidence = "--nproc_per_node " + nproc->second;
    }
  } else if (l.name == "accelerate") {
    const auto o = LongOptions(argv, from, {"num_processes", "num_machines"}, {});
    const auto num = o.find("num_processes");
    const auto machines = o.find("num_machines");
    if (num != o.end() && (machines == o.end() || machines->second == "1") && Count(num->second) > 0) {
      l.processes = Count(num->second);
      l.processes_evidence = "--num_processes " + num->second;
    }
  }
}

}  // namespace

std::optional<Launcher> RecognizeLauncher(const std::vector<std::string>& argv) {
  std::size_t i = 0;
  if (i < argv.size() && Base(argv[i]) == "env") {
    ++i;
    while (i < argv.size() && (argv[i].starts_with('-') || argv[i].find('=') != std::string::npos)) {
      if (argv[i] == "-u" || argv[i] == "--unset" || argv[i] == "-C" || argv[i] == "--chdir") ++i;
      ++i;
    }
  }
  if (i >= argv.size()) return std::nullopt;
  const std::string program = Base(argv[i]);
  auto next = [&](std::size_t k) { return k + 1 < argv.size() ? argv[k + 1] : std::string(); };
  if (auto name = LauncherProgram(program, next(i))) {
    Launcher l{*name, "argv[" + std::to_string(i) + "] is " + program};
    ReadProcesses(argv, i + 1, l);
    return l;
  }
  if (!IsPython(program)) return std::nullopt;
  for (std::size_t k = i + 1; k < argv.size(); ++k) {
    const std::string& a = argv[k];
    if (a == "-m" || (a.starts_with("-m") && a.size() > 2)) {
      const std::string module = a == "-m" ? next(k) : a.substr(2);
      if (auto name = LauncherModule(module)) {
        Launcher l{*name, program + " -m " + module};
        ReadProcesses(argv, a == "-m" ? k + 2 : k + 1, l);
        return l;
      }
      return std::nullopt;
    }
    if (a == "-c" || a.starts_with("-c") || a == "-" || a == "--") return std::nullopt;
    if (a.size() >= 2 && a[0] == '-' && a[1] != '-') {
      // -u, -uB, -X dev, -Xdev, -W ignore: skip the value when it is the next argument.
      if (TakesValue(a.back()) && a.find_first_of("XWQ") == a.size() - 1) ++k;
      continue;
    }
    if (a.starts_with("--")) continue;  // --version, --help: not a launcher either way
    // The script: a launcher's console entry point (/usr/bin/torchrun) run by the interpreter.
    if (auto name = LauncherProgram(Base(a), next(k))) {
      Launcher l{*name, program + " runs " + Base(a)};
      ReadProcesses(argv, k + 1, l);
      return l;
    }
    return std::nullopt;
  }
  return std::nullopt;
}

Result<std::filesystem::path> ResolveExecutable(const std::string& name, const std::filesystem::path& workdir) {
  if (name.empty()) return Error{"the command is empty"};
  if (name.find('/') != std::string::npos) {
    std::filesystem::path p(name);
    if (p.is_relative()) p = workdir / p;
    if (access(p.c_str(), X_OK) != 0) {
      return Error{"cannot run '" + name + "': " + p.string() + ": " + std::strerror(errno)};
    }
    return p;
  }
  const char* path_env = std::getenv("PATH");
  const std::string path = path_env ? path_env : "/usr/local/bin:/usr/bin:/bin";
  std::size_t start = 0;
  while (start <= path.size()) {
    const auto end = path.find(':', start);
    const std::string dir = path.substr(start, end == std::string::npos ? std::string::npos : end - start);
    const std::filesystem::path candidate = std::filesystem::path(dir.empty() ? "." : dir) / name;
    if (access(candidate.c_str(), X_OK) == 0 && !std::filesystem::is_directory(candidate)) return candidate;
    if (end == std::string::npos) break;
    start = end + 1;
  }
  return Error{"cannot run '" + name + "': not found in PATH (" + path + ")"};
}

}  // namespace spotvisor::command

// The command mirror; see command_mirror.hpp. Templates: {checkpoint} (absolute path),
// {name}, {step}, {job}, {checkpoint_dir}; restore_command gets {restore_dir}.
#include "spotvisor/mirror/command_mirror.hpp"

#include <unistd.h>

#include <algorithm>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "spotvisor/config/name_pattern.hpp"
#include "spotvisor/log/log.hpp"
#include "spotvisor/process/blocking_command.hpp"
#include "spotvisor/util/atomic_file.hpp"

namespace spotvisor::mirror {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;
using log::Log;
using log::LogLevel;
using log::Quote;

}  // namespace

CommandMirror::CommandMirror(const config::JobConfig& job, process::ChildTable& children)
    : job_(job), children_(children), record_(job.telemetry.state_dir / "mirror.json") {}

std::string CommandMirror::Describe() const { return "command " + job_.checkpoints.mirror.command.front(); }

config::TemplateVars CommandMirror::Vars(const MirrorItem* item) const {
  config::TemplateVars vars{{"job", job_.job.name}, {"checkpoint_dir", fs::absolute(*job_.checkpoints.dir).string()}};
  if (item) {
    vars["checkpoint"] = item->path.string();
    vars["name"] = item->name;
    vars["step"] = std::to_string(item->step);
  }
  return vars;
}

Status CommandMirror::Run(const std::vector<std::string>& argv_template, const config::TemplateVars& vars,
                          const CopyControl& control, const std::string& what) const {
  auto argv = config::ExpandArgv(argv_template, vars);
  if (!argv) return Error{"checkpoints.mirror: " + argv.error().message};
  process::CommandSpec spec;
  spec.argv = std::move(*argv);
  spec.workdir = job_.job.workdir;
  spec.timeout = job_.checkpoints.mirror.timeout;
  spec.die_with_parent = false;  // an upload in flight may finish after a SIGKILLed spotvisor
  const auto outcome = process::RunCommand(children_, spec, control.stop);
  if (outcome.end == process::CommandEnd::kSpawnFailed) return Error{outcome.error};
  if (!outcome.ok()) return Error{what + " command " + spec.argv.front() + " failed: " + outcome.Describe()};
  return Ok{};
}

std::vector<CommandMirror::Uploaded> CommandMirror::Load() const {
  std::vector<Uploaded> out;
  std::ifstream in(record_);
  if (!in) return out;
  try {
    const json j = json::parse(in);
    for (const auto& u : j.at("uploaded"))
      out.push_back({u.at("name").get<std::string>(), u.at("step").get<std::uint64_t>()});
  } catch (const json::exception& e) {
    Log(LogLevel::kWarning,
        "event=mirror_record_unreadable path=" + Quote(record_.string()) + " error=" + Quote(e.what()));
  }
  return out;
}

Status CommandMirror::Save(const std::vector<Uploaded>& uploaded) const {
  json list = json::array();
  for (const auto& u : uploaded) list.push_back({{"name", u.name}, {"step", u.step}});
  std::error_code ec;
  fs::create_directories(record_.parent_path(), ec);
  return WriteFileAtomically(record_, json{{"uploaded", list}}.dump(2) + "\n");
}

Result<UploadResult> CommandMirror::Upload(const MirrorItem& item, const CopyControl& control) {
  {
    std::lock_guard lock(mutex_);
    const auto done = Load();
    if (std::any_of(done.begin(), done.end(), [&](const Uploaded& u) { return u.name == item.name; })) {
      return UploadResult::kAlreadyThere;
    }
  }
  if (Status s = Run(job_.checkpoints.mirror.command, Vars(&item), control, "mirror"); !s) return s.error();
  std::lock_guard lock(mutex_);
  auto done = Load();
  done.push_back({item.name, item.step});
  if (Status s = Save(done); !s) return s.error();
  return UploadResult::kUploaded;
}

Result<std::vector<std::string>> CommandMirror::Prune(int keep, const CopyControl& control) {
  std::lock_guard lock(mutex_);
  std::vector<std::string> removed;
  auto done = Load();
  if (keep <= 0 || done.size() <= static_cast<std::size_t>(keep)) return removed;
  if (job_.checkpoints.mirror.prune_command.empty()) return removed;  // the observer says so once
  std::sort(done.begin(), done.end(), [](const Uploaded& a, const Uploaded& b) { return a.step > b.step; });
  while (done.size() > static_cast<std::size_t>(keep)) {
    const Uploaded oldest = done.back();
    MirrorItem item{fs::absolute(*job_.checkpoints.dir) / oldest.name, oldest.name, oldest.step};
    if (Status s = Run(job_.checkpoints.mirror.prune_command, Vars(&item), control, "prune"); !s) {
      return s.error();
    }
    done.pop_back();
    removed.push_back(oldest.name);
    if (Status s = Save(done); !s) return s.error();
  }
  return removed;
}

Result<RestoreResult> CommandMirror::Restore(std::optional<std::uint64_t> local_step, const CopyControl& control) {
  const auto& restore = job_.checkpoints.mirror.restore_command;
  if (restore.empty()) return RestoreResult{std::nullopt, "checkpoints.mirror.restore_command is not set"};
  const fs::path local_dir = fs::absolute(*job_.checkpoints.dir);
  const fs::path staging = local_dir / (std::string(kRestoreStaging) + "-" + std::to_string(getpid()));
  std::error_code ec;
  fs::remove_all(staging, ec);
  fs::create_directories(staging, ec);
  if (ec) return Error{"cannot create " + staging.string() + ": " + ec.message()};
  auto vars = Vars(nullptr);
  vars["restore_dir"] = staging.string();
  Result<RestoreResult> result = RestoreResult{};
  std::vector<Uploaded> on_mirror;  // everything the restore command fetched is on the mirror
  if (Status s = Run(restore, vars, control, "restore"); !s) {
    result = s.error();
  } else {
    if (auto pattern = config::NamePattern::Parse(job_.checkpoints.pattern)) {
      for (fs::directory_iterator it(staging, ec), end; !ec && it != end; it.increment(ec)) {
        const std::string name = it->path().filename().string();
        if (auto step = pattern->Match(name)) on_mirror.push_back({name, *step});
      }
    }
    result = RestoreNewestFrom(job_, staging, local_step, [&](const fs::path& from, const std::string& name) -> Status {
      std::error_code mv;
      fs::rename(from, local_dir / name, mv);
      if (mv) return Error{"cannot move " + from.string() + " into " + local_dir.string() + ": " + mv.message()};
      return SyncDirectory(local_dir);
    });
  }
  fs::remove_all(staging, ec);
  if (!on_mirror.empty()) {
    // A new machine learns what the mirror holds: nothing fetched is uploaded again, and
    // retention counts the older machine's uploads too.
    std::lock_guard lock(mutex_);
    auto done = Load();
    for (const auto& u : on_mirror) {
      if (std::none_of(done.begin(), done.end(), [&](const Uploaded& d) { return d.name == u.name; }))
        done.push_back(u);
    }
    if (Status s = Save(done); !s) return s.error();
  }
  return result;
}

}  // namespace spotvisor::mirror

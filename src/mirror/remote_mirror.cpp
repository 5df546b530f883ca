// The object-store mirror; see remote_mirror.hpp. Every rclone call runs through the one
// command runner (process/blocking_command.hpp), `-q` so that its output is only what was
// asked for (listings, a marker), with the job's `mirror.rclone_flags` appended.
#include "spotvisor/mirror/remote_mirror.hpp"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <nlohmann/json.hpp>

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

constexpr std::string_view kMarkerSuffix = ".json";
// rclone's exit code when the path it was given does not exist (an empty local remote).
constexpr int kRcloneDirNotFound = 3;
// Listing, reading a marker, deleting: small requests, bounded well below an upload's limit.
constexpr std::chrono::minutes kSmallRequestLimit{10};

std::string Trimmed(std::string s) {
  while (!s.empty() && s.back() == '/') s.pop_back();
  return s;
}

}  // namespace

RemoteMirror::RemoteMirror(const config::JobConfig& job, config::NamePattern pattern, process::ChildTable& children)
    : job_(job), children_(children), remote_(Trimmed(*job.checkpoints.mirror.remote)), pattern_(std::move(pattern)) {}

std::string RemoteMirror::Describe() const { return "remote " + remote_; }

std::string RemoteMirror::At(const std::string& name) const { return remote_ + "/" + name; }

Status RemoteMirror::Rclone(std::vector<std::string> args, const CopyControl& control, const std::string& what,
                            std::vector<std::string>* lines, bool bandwidth) const {
  const auto& m = job_.checkpoints.mirror;
  process::CommandSpec spec;
  spec.argv = {"rclone"};
  spec.argv.insert(spec.argv.end(), args.begin(), args.end());
  spec.argv.push_back("-q");
  if (bandwidth && m.bandwidth > 0) {
    // The cap is the mirror's: shared by the uploads that may run at once.
    const auto each = std::max<std::uint64_t>(1, m.bandwidth / static_cast<std::uint64_t>(std::max(1, m.concurrency)));
    spec.argv.push_back("--bwlimit");
    spec.argv.push_back(std::to_string(each) + "B");
  }
  spec.argv.insert(spec.argv.end(), m.rclone_flags.begin(), m.rclone_flags.end());
  spec.workdir = job_.job.workdir;
  spec.timeout = bandwidth ? std::chrono::duration_cast<std::chrono::milliseconds>(m.timeout)
                           : std::min<std::chrono::milliseconds>(m.timeout, kSmallRequestLimit);
  // Gone with a SIGKILLed spotvisor: its marker would never come, so its bytes are wasted.
  spec.die_with_parent = true;
  std::vector<std::string> output;
  spec.on_line = [&output](std::string_view line) {
    if (output.size() < 100000) output.emplace_back(line);
  };
  const auto outcome = process::RunCommand(children_, spec, control.stop);
  if (outcome.end == process::CommandEnd::kSpawnFailed) return Error{"checkpoints.mirror.remote: " + outcome.error};
  if (outcome.end == process::CommandEnd::kExited && outcome.exit_code == kRcloneDirNotFound && lines) {
    lines->clear();  // nothing there yet
    return Ok{};
  }
  if (!outcome.ok()) {
    std::string said;
    for (std::size_t i = output.size() > 3 ? output.size() - 3 : 0; i < output.size(); ++i) said += " " + output[i];
    return Error{what + ": rclone " + args.front() + " failed: " + outcome.Describe() +
                 (said.empty() ? "" : ":" + said)};
  }
  if (lines) *lines = std::move(output);
  return Ok{};
}

Result<std::vector<RemoteMirror::Marker>> RemoteMirror::Complete(const CopyControl& control) const {
  std::vector<std::string> lines;
  if (Status s = Rclone({"lsf", At(std::string(kCompleteDir)) + "/"}, control, "listing " + remote_, &lines); !s)
    return s.error();
  std::vector<Marker> out;
  for (const auto& line : lines) {
    if (line.size() <= kMarkerSuffix.size() || !line.ends_with(kMarkerSuffix)) continue;
    Marker m;
    m.name = line.substr(0, line.size() - kMarkerSuffix.size());
    const auto step = pattern_.Match(m.name);
    if (!step) continue;
    m.step = *step;
    out.push_back(std::move(m));
  }
  std::sort(out.begin(), out.end(), [](const Marker& a, const Marker& b) { return a.step > b.step; });
  return out;
}

Result<RemoteMirror::Marker> RemoteMirror::ReadMarker(const std::string& name, const CopyControl& control) const {
  const std::string where = At(std::string(kCompleteDir) + "/" + name + std::string(kMarkerSuffix));
  std::vector<std::string> lines;
  if (Status s = Rclone({"cat", where}, control, "reading " + where, &lines); !s) return s.error();
  std::string text;
  for (const auto& l : lines) text += l;
  try {
    const json j = json::parse(text);
    Marker m;
    m.name = j.at("name").get<std::string>();
    m.step = j.at("step").get<std::uint64_t>();
    m.bytes = j.at("bytes").get<std::uint64_t>();
    m.files = j.at("files").get<std::size_t>();
    m.directory = j.at("directory").get<bool>();
    if (m.name != name) return Error{where + " names " + Quote(m.name) + ", not " + Quote(name)};
    return m;
  } catch (const json::exception& e) {
    return Error{where + " is not a spotvisor marker: " + e.what()};
  }
}

Status RemoteMirror::WriteMarker(const Marker& marker, const CopyControl& control) const {
  // When it was written is the object's own time on the remote.
  const json j{{"name", marker.name},
               {"step", marker.step},
               {"bytes", marker.bytes},
               {"files", marker.files},
               {"directory", marker.directory}};
  std::error_code ec;
  fs::create_directories(job_.telemetry.state_dir, ec);
  const fs::path local = job_.telemetry.state_dir / ("mirror-marker-" + marker.name + std::string(kMarkerSuffix));
  if (Status s = WriteFileAtomically(local, j.dump() + "\n"); !s) return s;
  Status s =
      Rclone({"copyto", local.string(), At(std::string(kCompleteDir) + "/" + marker.name + std::string(kMarkerSuffix))},
             control, "writing the marker of " + marker.name);
  fs::remove(local, ec);
  return s;
}

Status RemoteMirror::DeleteMarker(const std::string& name, const CopyControl& control) const {
  return Rclone({"deletefile", At(std::string(kCompleteDir) + "/" + name + std::string(kMarkerSuffix))}, control,
                "deleting the marker of " + name);
}

Result<std::pair<std::uint64_t, std::size_t>> RemoteMirror::ListedBytes(const std::string& name,
                                                                        const CopyControl& control) const {
  std::vector<std::string> lines;
  if (Status s = Rclone({"lsjson", "-R", "--files-only", At(name)}, control, "listing " + At(name), &lines); !s)
    return s.error();
  std::string text;
  for (const auto& l : lines) text += l;
  if (text.empty()) return std::pair<std::uint64_t, std::size_t>{0, 0};
  try {
    std::uint64_t bytes = 0;
    std::size_t files = 0;
    for (const auto& e : json::parse(text)) {
      bytes += e.at("Size").get<std::uint64_t>();
      ++files;
    }
    return std::pair{bytes, files};
  } catch (const json::exception& e) {
    return Error{"cannot read rclone's listing of " + At(name) + ": " + e.what()};
  }
}

Result<UploadResult> RemoteMirror::Upload(const MirrorItem& item, const CopyControl& control) {
  std::error_code ec;
  const bool directory = fs::is_directory(item.path, ec);
  const auto bytes = TreeBytes(item.path);
  if (!bytes) return Error{"cannot read " + item.path.string()};
  if (auto there = ReadMarker(item.name, control); there) {
    if (there->step == item.step && there->bytes == *bytes) return UploadResult::kAlreadyThere;
    // Another checkpoint under this name (a fixed name saved over): not complete from here on.
    if (Status s = DeleteMarker(item.name, control); !s) return s.error();
  }
  // A directory is synced (files a cut-short upload of the same name left behind go).
  if (Status s = Rclone({directory ? "sync" : "copyto", item.path.string(), At(item.name)}, control,
                        "uploading " + item.name, nullptr, /*bandwidth=*/true);
      !s) {
    return s.error();
  }
  // rclone checks each file's hash where the store gives one; the sizes listed back say
  // every file arrived whole before the marker says so.
  auto listed = ListedBytes(item.name, control);
  if (!listed) return listed.error();
  Marker marker{item.name, item.step, *bytes, 0, directory};
  std::size_t local_files = 1;
  if (directory) {
    local_files = 0;
    for (fs::recursive_directory_iterator it(item.path, ec), end; !ec && it != end; it.increment(ec))
      if (it->is_regular_file(ec)) ++local_files;
  }
  marker.files = local_files;
  if (listed->first != *bytes || listed->second != local_files) {
    return Error{At(item.name) + " holds " + std::to_string(listed->first) + " bytes in " +
                 std::to_string(listed->second) + " files after the upload, " + item.path.string() + " has " +
                 std::to_string(*bytes) + " in " + std::to_string(local_files) + " (changed while uploading?)"};
  }
  if (Status s = WriteMarker(marker, control); !s) return s.error();
  return UploadResult::kUploaded;
}

// The first early file of a name deletes its marker when there is one (an older checkpoint
// under a fixed name): from then on the bytes there are no longer that checkpoint's.
Status RemoteMirror::UploadEarly(const MirrorItem& item, const fs::path& relative, const CopyControl& control) {
  {
    std::lock_guard lock(early_mutex_);
    if (early_name_ != item.name) {
      std::vector<std::string> lines;
      if (Status s = Rclone({"lsf", At(std::string(kCompleteDir) + "/" + item.name + std::string(kMarkerSuffix))},
                            control, "looking for the marker of " + item.name, &lines);
          !s) {
        return s;
      }
      if (!lines.empty()) {
        if (Status s = DeleteMarker(item.name, control); !s) return s;
      }
      early_name_ = item.name;
    }
  }
  return Rclone({"copyto", (item.path / relative).string(), At(item.name + "/" + relative.generic_string())}, control,
                "uploading " + item.name + "/" + relative.generic_string() + " before its verdict", nullptr,
                /*bandwidth=*/true);
}

Result<std::vector<std::string>> RemoteMirror::Prune(int keep, const CopyControl& control) {
  std::lock_guard lock(prune_mutex_);
  std::vector<std::string> removed;
  if (keep <= 0) return removed;
  auto complete = Complete(control);
  if (!complete) return complete.error();
  for (std::size_t i = static_cast<std::size_t>(keep); i < complete->size(); ++i) {
    const std::string& name = (*complete)[i].name;
    auto marker = ReadMarker(name, control);
    if (!marker) return marker.error();
    // The marker first: a checkpoint half deleted is never taken for a whole one.
    if (Status s = DeleteMarker(name, control); !s) return s.error();
    if (Status s = Rclone({marker->directory ? "purge" : "deletefile", At(name)}, control, "pruning " + name); !s)
      return s.error();
    removed.push_back(name);
  }
  return removed;
}

Status RemoteMirror::Fetch(const Marker& marker, const fs::path& staging, const CopyControl& control) const {
  if (Status s = Rclone({marker.directory ? "copy" : "copyto", At(marker.name), (staging / marker.name).string()},
                        control, "fetching " + marker.name);
      !s) {
    return s;
  }
  const auto bytes = TreeBytes(staging / marker.name);
  if (!bytes || *bytes != marker.bytes) {
    return Error{"fetched " + std::to_string(bytes.value_or(0)) + " bytes of " + At(marker.name) +
                 ", its marker says " + std::to_string(marker.bytes)};
  }
  return Ok{};
}

Result<RestoreResult> RemoteMirror::Restore(std::optional<std::uint64_t> local_step, const CopyControl& control) {
  auto complete = Complete(control);
  if (!complete) return complete.error();
  const fs::path local_dir = fs::absolute(*job_.checkpoints.dir);
  const fs::path staging = local_dir / (std::string(kRestoreStaging) + "-" + std::to_string(getpid()));
  RestoreResult result;
  for (const auto& candidate : *complete) {  // newest first
    if (local_step && candidate.step <= *local_step) break;
    std::error_code ec;
    fs::remove_all(staging, ec);
    fs::create_directories(staging, ec);
    if (ec) return Error{"cannot create " + staging.string() + ": " + ec.message()};
    auto marker = ReadMarker(candidate.name, control);
    Status fetched = marker ? Fetch(*marker, staging, control) : Status{marker.error()};
    if (!fetched) {
      Log(LogLevel::kWarning,
          "event=mirror_restore_skipped name=" + Quote(candidate.name) + " error=" + Quote(fetched.error().message));
      result.detail += candidate.name + ": " + fetched.error().message + "; ";
      continue;
    }
    // Validated in checkpoints.dir; a bad one is removed there and the next older tried.
    auto one =
        RestoreNewestFrom(job_, staging, local_step, [&](const fs::path& from, const std::string& name) -> Status {
          std::error_code mv;
          fs::rename(from, local_dir / name, mv);
          if (mv) return Error{"cannot move " + from.string() + " into " + local_dir.string() + ": " + mv.message()};
          return SyncDirectory(local_dir);
        });
    fs::remove_all(staging, ec);
    if (!one) return one.error();
    if (one->restored) return one;
    result.detail += one->detail;
  }
  if (result.detail.empty()) {
    result.detail = local_step ? "the mirror has nothing newer than step " + std::to_string(*local_step)
                               : "the mirror has no complete checkpoint";
  }
  return result;
}

}  // namespace spotvisor::mirror

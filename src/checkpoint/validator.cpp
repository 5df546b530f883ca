// Checkpoint verdicts; see validator.hpp. Order matters for the reason users read: the
// marker, the manifest, the framework layout (framework_layout.hpp), then each file.
#include "spotvisor/checkpoint/validator.hpp"

#include <algorithm>
#include <map>
#include <set>
#include <vector>

#include "framework_layout.hpp"
#include "rel_path.hpp"
#include "spotvisor/checkpoint/file_check.hpp"
#include "spotvisor/checkpoint/manifest.hpp"

namespace spotvisor::checkpoint {
namespace {

namespace fs = std::filesystem;
using config::ValidateLevel;

constexpr std::size_t kMaxFiles = 1'000'000;

Verdict Bad(std::string reason, std::string format = "") { return {false, std::move(reason), std::move(format)}; }

using Item = CheckpointFile;

bool Inside(const fs::path& canonical_target, const fs::path& canonical_root) {
  auto rel = canonical_target.lexically_relative(canonical_root);
  return !rel.empty() && *rel.begin() != "..";
}

// A symlink's final target, checked: no loop, inside `root` (when given).
Result<fs::path> ResolveLink(const fs::path& link, const fs::path& root) {
  std::error_code ec;
  const fs::path target = fs::canonical(link, ec);
  if (ec) {
    if (ec == std::errc::too_many_symbolic_link_levels) return Error{link.string() + ": symlink loop"};
    return Error{link.string() + ": symlink cannot be resolved: " + ec.message()};
  }
  if (!root.empty()) {
    const fs::path croot = fs::weakly_canonical(root, ec);
    if (!Inside(target, croot)) {
      return Error{link.string() + ": symlink escapes the checkpoint directory (points to " + target.string() + ")"};
    }
  }
  return target;
}

Result<std::vector<Item>> Walk(const fs::path& dir, const fs::path& root) {
  std::vector<Item> items;
  std::error_code ec;
  fs::recursive_directory_iterator it(dir, fs::directory_options::none, ec);
  if (ec) return Error{"cannot list " + dir.string() + ": " + ec.message()};
  for (; it != fs::recursive_directory_iterator(); it.increment(ec)) {
    if (ec) return Error{"cannot list " + dir.string() + ": " + ec.message()};
    const auto st = it->symlink_status(ec);
    if (ec) return Error{"cannot stat " + it->path().string() + ": " + ec.message()};
    Item item{it->path().lexically_relative(dir).generic_string(), it->path()};
    if (fs::is_symlink(st)) {
      auto target = ResolveLink(it->path(), root.empty() ? dir : root);
      if (!target) return target.error();
      if (fs::is_directory(*target)) return Error{it->path().string() + ": symlink to a directory inside a checkpoint"};
      item.path = *target;
    } else if (fs::is_directory(st)) {
      continue;
    } else if (!fs::is_regular_file(st)) {
      return Error{it->path().string() + ": not a regular file"};
    }
    if (item.rel.rfind(".spotvisor-tmp-", 0) == 0) continue;  // a seal in progress
    items.push_back(std::move(item));
    if (items.size() > kMaxFiles) return Error{dir.string() + ": more than a million files"};
  }
  std::sort(items.begin(), items.end(), [](const Item& a, const Item& b) { return a.rel < b.rel; });
  return items;
}

std::string Base(const std::string& rel) {
  const auto slash = rel.rfind('/');
  return slash == std::string::npos ? rel : rel.substr(slash + 1);
}

Status CheckManifest(const fs::path& path, bool is_dir, const ValidatorOptions& o, bool& present) {
  const fs::path mpath = ManifestPathFor(path, is_dir);
  std::error_code ec;
  present = fs::exists(fs::symlink_status(mpath, ec));
  if (!present) return Ok{};
  auto manifest = ReadManifestFile(mpath);
  if (!manifest) return manifest.error();
  return VerifyManifest(*manifest, path, is_dir, {o.level == ValidateLevel::kFull, o.for_seal}, o.pool);
}

Verdict ValidateDirectory(const fs::path& dir, const ValidatorOptions& o) {
  auto items = Walk(dir, o.root);
  if (!items) return Bad(items.error().message);
  if (items->empty()) return Bad(dir.string() + ": empty directory (no files)");
  if (!o.marker.empty() && !fs::exists(dir / o.marker)) {
    return Bad(dir.string() + ": missing commit marker '" + o.marker + "'");
  }
  bool has_manifest = false;
  if (auto st = CheckManifest(dir, true, o, has_manifest); !st) return Bad(st.error().message, "manifest");
  auto commit = CheckLayout(dir, *items, o, has_manifest);
  if (!commit) return Bad(commit.error().message);
  std::map<std::string, int> counts;
  std::set<std::string> notes;
  int payload = 0;
  for (const auto& i : *items) {
    if (Base(i.rel) == kManifestName && RelParent(i.rel).empty()) continue;
    if (commit->checked.count(i.rel)) {  // a DCP shard, checked item by item against .metadata
      ++counts[i.rel.ends_with(".distcp") ? "dcp shard" : "dcp metadata"];
      if (i.rel.ends_with(".distcp")) ++payload;
      continue;
    }
    FileCheckOptions fo{o.level, !has_manifest || o.for_seal, "", o.pool, o.content};
    const FileCheck fc = CheckFile(i.path, fo);
    if (!fc.status) return Bad(fc.status.error().message, std::string(FormatName(fc.format)));
    ++counts[std::string(FormatName(fc.format))];
    if (IsPayloadFormat(fc.format)) ++payload;
    if (!fc.note.empty()) notes.insert(fc.note);
  }
  if ((o.format == "torch" && !counts.count("torch.save") && !counts.count("torch legacy pickle")) ||
      (o.format == "safetensors" && !counts.count("safetensors"))) {
    return Bad(dir.string() + ": no " + o.format + " file in it (checkpoints.format: " + o.format + ")");
  }
  std::string by = has_manifest ? "manifest" : !o.marker.empty() ? "marker '" + o.marker + "'" : commit->by;
  if (by.empty() && payload == 0 && o.format != "any") {
    return Bad(dir.string() +
               ": no torch.save, safetensors or DCP file and no manifest or commit marker: "
               "cannot tell whether it is complete (seal it with `spotvisor seal`, or set checkpoints.format: any)");
  }
  std::string summary = std::to_string(items->size()) + " files (";
  bool first = true;
  for (const auto& [name, n] : counts) {
    summary += (first ? "" : ", ") + std::to_string(n) + " " + name;
    first = false;
  }
  summary += ")";
  if (!by.empty()) summary += "; committed by " + by;
  for (const auto& n : notes) summary += "; " + n;
  std::string format = !commit->kind.empty() ? commit->kind
                       : payload > 0         ? "files"
                       : has_manifest        ? "manifest"
                                             : "files";
  return {true, summary, format};
}

Verdict ValidateFile(const fs::path& file, const ValidatorOptions& o) {
  if (o.format == "dcp" || o.format == "hf" || o.format == "orbax" || o.format == "deepspeed" ||
      o.format == "megatron" || o.format == "accelerate") {
    return Bad(file.string() + ": checkpoints.format " + o.format + " expects a directory, this is a file");
  }
  std::error_code ec;
  const auto size = fs::file_size(file, ec);
  if (ec) return Bad(file.string() + ": cannot stat: " + ec.message());
  if (size == 0) return Bad(file.string() + ": empty file (0 bytes)");
  if (!o.marker.empty()) {
    const fs::path marker = file.parent_path() / (file.filename().string() + "." + o.marker);
    if (!fs::exists(marker)) return Bad(file.string() + ": missing commit marker '" + marker.filename().string() + "'");
  }
  bool has_manifest = false;
  if (auto st = CheckManifest(file, false, o, has_manifest); !st) return Bad(st.error().message, "manifest");
  const std::string forced = (o.format == "torch" || o.format == "safetensors") ? o.format : "";
  const FileCheck fc = CheckFile(file, {o.level, !has_manifest || o.for_seal, forced, o.pool, o.content});
  const std::string format(FormatName(fc.format));
  if (!fc.status) return Bad(fc.status.error().message, format);
  if (fc.format == FileFormat::kUnknown && !has_manifest && o.format != "any") {
    return Bad(file.string() +
                   ": not a known checkpoint format (torch.save, safetensors) and no manifest "
                   "(seal it with `spotvisor seal`, or set checkpoints.format: any)",
               format);
  }
  std::string summary = format + ", " + std::to_string(size) + " bytes";
  if (has_manifest) summary += "; manifest verified";
  if (!fc.note.empty()) summary += "; " + fc.note;
  return {true, summary, format};
}

}  // namespace

ValidatorOptions ValidatorOptionsFor(const config::CheckpointsSection& c) {
  ValidatorOptions v;
  v.level = c.validate;
  v.format = c.format;
  v.marker = c.marker;
  v.content = c.content;
  v.processes = c.Processes();
  return v;
}

std::string_view LevelName(ValidateLevel level) {
  switch (level) {
    case ValidateLevel::kStructure:
      return "structure";
    case ValidateLevel::kFormat:
      return "format";
    case ValidateLevel::kFull:
      break;
  }
  return "full";
}

std::optional<ValidateLevel> ParseLevel(std::string_view text) {
  if (text == "structure") return ValidateLevel::kStructure;
  if (text == "format") return ValidateLevel::kFormat;
  if (text == "full") return ValidateLevel::kFull;
  return std::nullopt;
}

Verdict ValidateCheckpoint(const fs::path& path, const ValidatorOptions& o) {
  std::error_code ec;
  const auto st = fs::symlink_status(path, ec);
  if (ec || !fs::exists(st)) return Bad(path.string() + ": does not exist");
  fs::path target = path;
  if (fs::is_symlink(st)) {
    auto resolved = ResolveLink(path, o.root);
    if (!resolved) return Bad(resolved.error().message);
    target = *resolved;
  }
  if (fs::is_directory(target, ec)) return ValidateDirectory(target, o);
  if (fs::is_regular_file(target, ec)) return ValidateFile(target, o);
  return Bad(path.string() + ": neither a regular file nor a directory");
}

}  // namespace spotvisor::checkpoint

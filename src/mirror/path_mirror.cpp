// The directory mirror; see path_mirror.hpp.
#include "spotvisor/mirror/path_mirror.hpp"

#include <algorithm>

#include "spotvisor/log/log.hpp"

namespace spotvisor::mirror {
namespace {

namespace fs = std::filesystem;

}  // namespace

PathMirror::PathMirror(const config::JobConfig& job, config::NamePattern pattern)
    : job_(job), dir_(*job.checkpoints.mirror.path), pattern_(std::move(pattern)) {}

std::string PathMirror::Describe() const { return "path " + dir_.string(); }

Result<UploadResult> PathMirror::Upload(const MirrorItem& item, const CopyControl& control) {
  // A copy under the final name is complete (renamed into place after verification);
  // the same size means the same checkpoint was mirrored before.
  const auto there = TreeBytes(dir_ / item.name);
  if (there && there == TreeBytes(item.path)) return UploadResult::kAlreadyThere;
  auto copied = CopyVerified(item.path, dir_, item.name, control);
  if (!copied) return copied.error();
  return UploadResult::kUploaded;
}

Result<std::vector<std::string>> PathMirror::Prune(int keep, const CopyControl&) {
  std::lock_guard lock(prune_mutex_);
  std::vector<std::string> removed;
  if (keep <= 0) return removed;
  std::vector<std::pair<std::uint64_t, std::string>> found;
  std::error_code ec;
  for (fs::directory_iterator it(dir_, ec), end; !ec && it != end; it.increment(ec)) {
    const std::string name = it->path().filename().string();
    if (auto step = pattern_.Match(name)) found.emplace_back(*step, name);
  }
  if (ec) return Error{"cannot list the mirror " + dir_.string() + ": " + ec.message()};
  std::sort(found.begin(), found.end(), [](const auto& a, const auto& b) { return a.first > b.first; });
  for (std::size_t i = static_cast<std::size_t>(keep); i < found.size(); ++i) {
    std::error_code rm;
    fs::remove_all(dir_ / found[i].second, rm);
    if (rm) return Error{"cannot delete " + (dir_ / found[i].second).string() + " from the mirror: " + rm.message()};
    removed.push_back(found[i].second);
  }
  return removed;
}

Result<RestoreResult> PathMirror::Restore(std::optional<std::uint64_t> local_step, const CopyControl& control) {
  std::error_code ec;
  if (!fs::is_directory(dir_, ec))
    return RestoreResult{std::nullopt, "the mirror " + dir_.string() + " does not exist"};
  RemoveCopyLeftovers(dir_);
  const fs::path local_dir = fs::absolute(*job_.checkpoints.dir);
  return RestoreNewestFrom(job_, dir_, local_step, [&](const fs::path& from, const std::string& name) -> Status {
    auto copied = CopyVerified(from, local_dir, name, control);
    if (!copied) return copied.error();
    return Ok{};
  });
}

}  // namespace spotvisor::mirror

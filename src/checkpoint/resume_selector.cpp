// Resume selection by name only: the newest entry matching the pattern. The catalog
// replaces this with full validation.
#include "spotvisor/checkpoint/resume_selector.hpp"

#include <system_error>

#include "spotvisor/checkpoint/name_pattern.hpp"

namespace spotvisor::checkpoint {
namespace {

class NewestByName final : public ResumeSelector {
 public:
  explicit NewestByName(const config::JobConfig& job) : job_(job) {}

  Result<Selection> SelectForResume() override {
    Selection selection;
    if (!job_.checkpoints.dir) return selection;
    auto pattern = NamePattern::Parse(job_.checkpoints.pattern);
    if (!pattern) return pattern.error();
    const auto& dir = *job_.checkpoints.dir;
    std::error_code ec;
    std::filesystem::directory_iterator it(dir, ec);
    if (ec == std::errc::no_such_file_or_directory) return selection;
    if (ec) return Error{"cannot read checkpoint dir " + dir.string() + ": " + ec.message()};
    for (const auto& entry : it) {
      const auto step = pattern->Match(entry.path().filename().string());
      if (!step) continue;
      if (!selection.chosen || *step > selection.chosen->step) {
        selection.chosen = ResumePoint{dir / entry.path().filename(), *step};
      }
    }
    return selection;
  }

 private:
  const config::JobConfig& job_;  // outlives the selector
};

}  // namespace

std::unique_ptr<ResumeSelector> MakeResumeSelector(const config::JobConfig& job) {
  return std::make_unique<NewestByName>(job);
}

}  // namespace spotvisor::checkpoint

// The supervisor's resume selection, backed by the catalog: newest checkpoint that passes
// validation now; bad newer ones quarantined, retention and the latest link applied.
// Runs on the supervisor's worker thread.
#include "spotvisor/checkpoint/resume_selector.hpp"

#include "spotvisor/checkpoint/catalog.hpp"

namespace spotvisor::checkpoint {
namespace {

class FreshStart final : public ResumeSelector {
 public:
  Result<Selection> SelectForResume() override { return Selection{}; }
};

class CatalogSelector final : public ResumeSelector {
 public:
  explicit CatalogSelector(const config::JobConfig& job) : job_(job) {}

  Result<Selection> SelectForResume() override {
    // Built per call: the job's config may be reloaded between attempts, and the cache
    // file must be re-read in case another tool (spotvisor checkpoints) refreshed it.
    auto catalog = Catalog::FromConfig(job_);
    if (!catalog) return catalog.error();
    return catalog->Select(/*act=*/true);
  }

 private:
  const config::JobConfig& job_;  // outlives the selector
};

}  // namespace

std::vector<ResumePoint> GoodSteps(const Selection& selection) {
  if (selection.good.empty() && selection.chosen) return {*selection.chosen};
  return selection.good;
}

std::unique_ptr<ResumeSelector> MakeResumeSelector(const config::JobConfig& job) {
  if (!job.checkpoints.dir) return std::make_unique<FreshStart>();
  return std::make_unique<CatalogSelector>(job);
}

}  // namespace spotvisor::checkpoint

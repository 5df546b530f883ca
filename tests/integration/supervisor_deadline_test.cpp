// The supervisor's deadlines with the real driver in this process: a checkpoint selection
// that never returns (a hung mount, played by a selector that blocks until the test lets
// it go) ends the run with exit 1 at checkpoints.select_timeout, without waiting for it,
// and once the stuck selection returns, what it held is freed: nothing is left behind.
#include <gtest/gtest.h>

#include <chrono>
#include <condition_variable>
#include <future>
#include <memory>
#include <mutex>
#include <thread>

#include "spotvisor/config/loader.hpp"
#include "spotvisor/supervisor/driver.hpp"
#include "spotvisor/supervisor/outcome.hpp"
#include "spotvisor/supervisor/posix_host.hpp"
#include "support/log_capture.hpp"
#include "support/test_support.hpp"

namespace spotvisor {
namespace {

using namespace std::chrono_literals;

// Shared by the test and the selector it hands to the driver (which may outlive the test's
// view of it: a stuck selection's thread outlives the driver).
struct Gate {
  std::mutex mutex;
  std::condition_variable opened_cv;
  bool entered = false;  // SelectForResume was called
  bool open = false;     // the test let it return
  bool freed = false;    // the selector was destroyed
};

class StuckSelector final : public checkpoint::ResumeSelector {
 public:
  explicit StuckSelector(std::shared_ptr<Gate> gate) : gate_(std::move(gate)) {}
  ~StuckSelector() override {
    std::lock_guard lock(gate_->mutex);
    gate_->freed = true;
    gate_->opened_cv.notify_all();
  }
  Result<checkpoint::Selection> SelectForResume() override {
    std::unique_lock lock(gate_->mutex);
    gate_->entered = true;
    gate_->opened_cv.wait_for(lock, 60s, [this] { return gate_->open; });
    return checkpoint::Selection{};
  }

 private:
  std::shared_ptr<Gate> gate_;  // shared with the test
};

TEST(SupervisorDeadline, AStuckSelectionEndsTheRunWithExit1AtItsDeadline) {
  testing::TempDir dir;
  auto job = config::DefaultConfig(dir.path());
  job.job.name = "stuck";
  job.job.command = {"/bin/true"};
  job.provider.kind = config::ProviderKind::kNone;
  job.telemetry.state_dir = dir / "state";
  job.checkpoints.select_timeout = 300ms;
  ASSERT_TRUE(config::Finalize(job));
  auto gate = std::make_shared<Gate>();
  testing::LogCapture log;
  auto run = std::async(std::launch::async, [&job, gate] {
    supervisor::Driver driver(job, std::make_unique<StuckSelector>(gate), supervisor::MakePosixHost());
    return driver.Run();
  });
  // The run ends while the selection is still stuck (it would return only when opened).
  const bool ended = run.wait_for(20s) == std::future_status::ready;
  {
    std::lock_guard lock(gate->mutex);
    EXPECT_TRUE(gate->entered);
    gate->open = true;
  }
  gate->opened_cv.notify_all();
  ASSERT_TRUE(ended) << "the run waited for the stuck selection";
  EXPECT_EQ(run.get(), supervisor::Code(supervisor::ExitCode::kFailed));
  EXPECT_NE(log.Joined().find("event=select_timeout"), std::string::npos) << log.Joined();
  EXPECT_NE(log.Joined().find("checkpoints.select_timeout = 300ms"), std::string::npos) << log.Joined();
  EXPECT_EQ(log.Joined().find("event=trainer_started"), std::string::npos) << log.Joined();
  // The driver is gone; the abandoned selection, let go, returns and frees its selector.
  std::unique_lock lock(gate->mutex);
  EXPECT_TRUE(gate->opened_cv.wait_for(lock, 20s, [&gate] { return gate->freed; }))
      << "the stuck selection's selector was never freed";
}

}  // namespace
}  // namespace spotvisor

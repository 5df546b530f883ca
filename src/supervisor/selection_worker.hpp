// Private to src/supervisor/: the driver's checkpoint selections (the resume's, the drained
// validation's) run one at a time on a thread of their own, and each result is handed to
// the io thread. A job stuck in the kernel (a hung mount) is abandoned when the driver ends:
// its result is dropped and the thread finishes on its own, holding only what its job
// owns, so the driver neither waits for it nor leaves itself behind. Post and Abandon: io
// thread; the work: the worker thread.
#pragma once

#include <functional>
#include <memory>
#include <thread>

#include "spotvisor/checkpoint/resume_selector.hpp"
#include "spotvisor/util/clock.hpp"
#include "spotvisor/util/result.hpp"

namespace boost::asio {
class io_context;
}  // namespace boost::asio

namespace spotvisor::supervisor {

class SelectionWorker {
 public:
  using Work = std::function<Result<checkpoint::Selection>()>;
  using Done = std::function<void(Result<checkpoint::Selection>)>;

  // `io` receives every `done`; it must outlive the worker, not the abandoned thread. Each
  // job holds `clock`'s BackgroundWork token until its `done` is posted.
  SelectionWorker(boost::asio::io_context& io, Clock& clock);
  ~SelectionWorker();  // Abandon()
  SelectionWorker(const SelectionWorker&) = delete;
  SelectionWorker& operator=(const SelectionWorker&) = delete;

  // Runs `work` after the jobs posted before it (the thread starts with the first); `done`
  // gets its result on the io thread unless the worker was abandoned first. `work` must own
  // (or share) whatever it uses: an abandoned job may outlive the driver.
  void Post(Work work, Done done);

  // No `done` runs after this; the jobs not started are dropped. An idle thread is joined;
  // one still inside a job is left to finish it alone. Returns at once either way.
  void Abandon();

 private:
  struct Shared;
  static void Loop(const std::shared_ptr<Shared>& shared);

  Clock& clock_;                    // time stands still for a virtual one while a job runs
  std::shared_ptr<Shared> shared_;  // with the thread, which may outlive this object
  std::thread thread_;              // started by the first Post
};

}  // namespace spotvisor::supervisor

// The selection thread; see selection_worker.hpp. The result goes to the io_context under
// the mutex that Abandon takes, so once Abandon returns no post to a dying io_context can
// be in progress.
#include "selection_worker.hpp"

#include <boost/asio/io_context.hpp>
#include <boost/asio/post.hpp>
#include <condition_variable>
#include <deque>
#include <mutex>
#include <utility>

namespace spotvisor::supervisor {

struct SelectionWorker::Shared {
  std::mutex mutex;
  std::condition_variable wake;
  struct Job {
    Work work;
    Done done;
    std::shared_ptr<void> in_flight;  // the clock's BackgroundWork token
  };
  std::deque<Job> jobs;                   // not started yet
  boost::asio::io_context* io = nullptr;  // null once abandoned
  bool busy = false;                      // the thread is inside a job
};

SelectionWorker::SelectionWorker(boost::asio::io_context& io, Clock& clock)
    : clock_(clock), shared_(std::make_shared<Shared>()) {
  shared_->io = &io;
}

SelectionWorker::~SelectionWorker() { Abandon(); }

void SelectionWorker::Post(Work work, Done done) {
  {
    std::lock_guard lock(shared_->mutex);
    if (shared_->io == nullptr) return;
    shared_->jobs.push_back(Shared::Job{std::move(work), std::move(done), clock_.BackgroundWork()});
  }
  shared_->wake.notify_one();
  if (!thread_.joinable()) thread_ = std::thread([shared = shared_] { Loop(shared); });
}

void SelectionWorker::Abandon() {
  bool busy = false;
  {
    std::lock_guard lock(shared_->mutex);
    shared_->io = nullptr;
    shared_->jobs.clear();
    busy = shared_->busy;
  }
  shared_->wake.notify_one();
  if (!thread_.joinable()) return;
  if (busy) {
    thread_.detach();  // stuck (or about to finish): it ends on its own and drops the result
  } else {
    thread_.join();  // waiting for work: it sees the io gone and returns at once
  }
}

void SelectionWorker::Loop(const std::shared_ptr<Shared>& shared) {
  std::unique_lock lock(shared->mutex);
  for (;;) {
    shared->wake.wait(lock, [&] { return shared->io == nullptr || !shared->jobs.empty(); });
    if (shared->io == nullptr) return;
    auto [work, done, in_flight] = std::move(shared->jobs.front());
    shared->jobs.pop_front();
    shared->busy = true;
    lock.unlock();
    Result<checkpoint::Selection> result = work();
    work = nullptr;  // what the job owns goes now, not with the next one
    lock.lock();
    shared->busy = false;
    if (shared->io == nullptr) return;
    boost::asio::post(*shared->io,
                      [done = std::move(done), result = std::move(result)]() mutable { done(std::move(result)); });
    in_flight.reset();  // after the post: a virtual clock sees the answer before it moves on
  }
}

}  // namespace spotvisor::supervisor

// A small fork-join thread pool for hashing checkpoint bytes: the calling thread hands in
// N independent tasks, helps run them, and returns when all are done. Owns its threads;
// one ParallelFor at a time per pool (later callers wait). Never used from the io thread.
#pragma once

#include <condition_variable>
#include <cstddef>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace spotvisor::checkpoint {

class HashPool {
 public:
  // `threads` workers besides the caller; 0 = run everything on the caller.
  explicit HashPool(std::size_t threads);
  ~HashPool();
  HashPool(const HashPool&) = delete;
  HashPool& operator=(const HashPool&) = delete;

  // Runs task(0) .. task(count - 1), each once, on the workers and the caller; returns
  // when every call has returned. Tasks must not throw.
  void ParallelFor(std::size_t count, const std::function<void(std::size_t)>& task);

  std::size_t threads() const { return workers_.size(); }

  // The process-wide pool: min(4, hardware threads) - 1 workers (at least 1).
  static HashPool& Shared();

 private:
  void WorkerLoop();
  // Runs tasks of the current batch until none is left; `lock` is held on entry and exit.
  void Drain(std::unique_lock<std::mutex>& lock);

  std::mutex mutex_;                                        // guards everything below
  std::condition_variable wake_;                            // a batch arrived, or stopping
  std::condition_variable done_;                            // the batch's last task finished
  std::mutex batch_mutex_;                                  // one ParallelFor at a time
  const std::function<void(std::size_t)>* task_ = nullptr;  // the running batch
  std::size_t next_ = 0;                                    // next index to hand out
  std::size_t count_ = 0;                                   // tasks in the batch
  std::size_t unfinished_ = 0;                              // tasks handed out or pending, not yet returned
  std::size_t generation_ = 0;                              // bumps per batch, so workers wake once per batch
  bool stopping_ = false;
  std::vector<std::thread> workers_;  // joined in the destructor
};

}  // namespace spotvisor::checkpoint

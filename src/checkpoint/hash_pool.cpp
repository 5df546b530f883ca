// Fork-join pool for hashing; see hash_pool.hpp. The caller runs tasks too, so a pool of
// zero workers is simply sequential.
#include "spotvisor/checkpoint/hash_pool.hpp"

#include <algorithm>

namespace spotvisor::checkpoint {

HashPool::HashPool(std::size_t threads) {
  workers_.reserve(threads);
  for (std::size_t i = 0; i < threads; ++i) workers_.emplace_back([this] { WorkerLoop(); });
}

HashPool::~HashPool() {
  {
    std::lock_guard lock(mutex_);
    stopping_ = true;
  }
  wake_.notify_all();
  for (auto& t : workers_) t.join();
}

HashPool& HashPool::Shared() {
  static HashPool pool([] {
    const std::size_t hw = std::max<std::size_t>(1, std::thread::hardware_concurrency());
    return std::max<std::size_t>(1, std::min<std::size_t>(4, hw) - 1);
  }());
  return pool;
}

void HashPool::ParallelFor(std::size_t count, const std::function<void(std::size_t)>& task) {
  if (count == 0) return;
  std::lock_guard batch(batch_mutex_);
  std::unique_lock lock(mutex_);
  task_ = &task;
  next_ = 0;
  count_ = count;
  unfinished_ = count;
  ++generation_;
  wake_.notify_all();
  Drain(lock);
  done_.wait(lock, [this] { return unfinished_ == 0; });
  task_ = nullptr;
}

void HashPool::Drain(std::unique_lock<std::mutex>& lock) {
  while (task_ != nullptr && next_ < count_) {
    const std::size_t index = next_++;
    const auto* task = task_;
    lock.unlock();
    (*task)(index);
    lock.lock();
    if (--unfinished_ == 0) done_.notify_all();
  }
}

void HashPool::WorkerLoop() {
  std::unique_lock lock(mutex_);
  std::size_t seen = 0;
  while (true) {
    wake_.wait(lock, [&] { return stopping_ || (generation_ != seen && task_ != nullptr); });
    if (stopping_) return;
    seen = generation_;
    Drain(lock);
  }
}

}  // namespace spotvisor::checkpoint

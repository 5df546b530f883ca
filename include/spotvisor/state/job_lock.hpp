// The job lock: an exclusive flock on <state_dir>/lock, held for the supervisor's life, so
// that two supervisors never run one job. The kernel drops it when the process dies, even
// by SIGKILL; the file descriptor is close-on-exec so the trainer never inherits it.
#pragma once

#include <sys/types.h>

#include <filesystem>

#include "spotvisor/util/result.hpp"

namespace spotvisor::state {

class JobLock {
 public:
  // Creates the state dir if needed. When another process holds the lock, returns an
  // Error naming it and sets *holder to its pid (or -1 when unknown); otherwise *holder = 0.
  static Result<JobLock> Acquire(const std::filesystem::path& state_dir, pid_t* holder);

  JobLock(JobLock&& other) noexcept;
  JobLock& operator=(JobLock&& other) noexcept;
  JobLock(const JobLock&) = delete;
  JobLock& operator=(const JobLock&) = delete;
  ~JobLock();

 private:
  explicit JobLock(int fd) : fd_(fd) {}
  int fd_ = -1;  // owned; the flock lives as long as it is open
};

}  // namespace spotvisor::state

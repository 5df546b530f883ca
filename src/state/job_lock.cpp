// flock-based job lock; see job_lock.hpp. Our pid is written into the lock file so that a
// refused second supervisor can say who holds the job.
#include "spotvisor/state/job_lock.hpp"

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <string>

namespace spotvisor::state {

Result<JobLock> JobLock::Acquire(const std::filesystem::path& state_dir, pid_t* holder) {
  *holder = 0;
  std::error_code ec;
  std::filesystem::create_directories(state_dir, ec);
  if (ec) return Error{"cannot create state dir " + state_dir.string() + ": " + ec.message()};
  const auto path = state_dir / "lock";
  const int fd = open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  if (fd < 0) return Error{"cannot open lock file " + path.string() + ": " + std::strerror(errno)};
  if (flock(fd, LOCK_EX | LOCK_NB) != 0) {
    const int err = errno;
    char buf[32] = {};
    const ssize_t n = pread(fd, buf, sizeof buf - 1, 0);
    close(fd);
    if (err != EWOULDBLOCK) return Error{"cannot lock " + path.string() + ": " + std::strerror(err)};
    *holder = n > 0 ? static_cast<pid_t>(std::atol(buf)) : -1;
    return Error{"another spotvisor" + (*holder > 0 ? " (pid " + std::to_string(*holder) + ")" : std::string()) +
                 " is already running this job (state dir " + state_dir.string() + " is locked)"};
  }
  const std::string pid = std::to_string(getpid()) + "\n";
  if (ftruncate(fd, 0) != 0 || pwrite(fd, pid.data(), pid.size(), 0) < 0) {
    // The lock is what matters; the pid is only for the message of a refused second run.
  }
  return JobLock(fd);
}

JobLock::JobLock(JobLock&& other) noexcept : fd_(other.fd_) { other.fd_ = -1; }

JobLock& JobLock::operator=(JobLock&& other) noexcept {
  if (this != &other) {
    if (fd_ >= 0) close(fd_);
    fd_ = other.fd_;
    other.fd_ = -1;
  }
  return *this;
}

JobLock::~JobLock() {
  if (fd_ >= 0) close(fd_);
}

}  // namespace spotvisor::state

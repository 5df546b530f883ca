// Shared by every test tier: temp dirs that clean up, polling with a deadline instead of
// fixed sleeps, and running the real spotvisor binary as a subprocess.
#pragma once

#include <sys/prctl.h>
#include <sys/types.h>

#include <chrono>
#include <filesystem>
#include <functional>
#include <map>
#include <string>
#include <vector>

namespace spotvisor::testing {

// A fresh directory under $TMPDIR, removed with everything in it on destruction.
class TempDir {
 public:
  TempDir();
  ~TempDir();
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  const std::filesystem::path& path() const { return path_; }
  std::filesystem::path operator/(const std::string& name) const { return path_ / name; }

 private:
  std::filesystem::path path_;  // owned
};

// Polls `done` every few ms until it returns true or `timeout` passes; returns its last answer.
bool WaitUntil(const std::function<bool()>& done, std::chrono::milliseconds timeout = std::chrono::seconds(10));

// True while `pid` exists and is not a zombie.
bool ProcessAlive(pid_t pid);

void WriteFile(const std::filesystem::path& path, const std::string& text);
std::string ReadFile(const std::filesystem::path& path);
std::vector<std::string> ReadLines(const std::filesystem::path& path);
// How many times `needle` occurs in `text` (log lines of an event, say).
std::size_t Count(const std::string& text, const std::string& needle);

// A small but valid checkpoint directory (one safetensors file) at `dir`.
void WriteValidCheckpoint(const std::filesystem::path& dir);

// A running child process with its stdout+stderr going to a file.
struct Spawned {
  pid_t pid = -1;
  std::filesystem::path output;  // stdout and stderr together
};

// Starts argv[0] with argv (no shell), output to `output`, extra env added.
Spawned Spawn(const std::vector<std::string>& argv, const std::filesystem::path& output,
              const std::map<std::string, std::string>& env = {});

// Waits for `pid` and returns its exit code (128+signal when killed); -1 on timeout.
int WaitExit(pid_t pid, std::chrono::milliseconds timeout = std::chrono::seconds(30));

// Runs the spotvisor binary to completion; returns the exit code and fills `output`.
int RunSpotvisor(const std::vector<std::string>& args, std::string* output = nullptr,
                 std::chrono::milliseconds timeout = std::chrono::seconds(60));

// A real unix datagram socket standing in for systemd's NOTIFY_SOCKET: a path, or an
// abstract name starting with '@'.
class NotifySocket {
 public:
  explicit NotifySocket(const std::string& name);
  ~NotifySocket();
  NotifySocket(const NotifySocket&) = delete;
  NotifySocket& operator=(const NotifySocket&) = delete;
  // The next datagram, or "<nothing>" after `timeout`.
  std::string Receive(std::chrono::milliseconds timeout = std::chrono::seconds(2));

 private:
  int fd_ = -1;  // owned
};

// This process adopts orphaned grandchildren while it lives, as `spotvisor run` does
// (PR_SET_CHILD_SUBREAPER), so that a test's child table reaps them, not the test's init.
class Subreaper {
 public:
  Subreaper() { prctl(PR_SET_CHILD_SUBREAPER, 1); }
  ~Subreaper() { prctl(PR_SET_CHILD_SUBREAPER, 0); }
  Subreaper(const Subreaper&) = delete;
  Subreaper& operator=(const Subreaper&) = delete;
};

}  // namespace spotvisor::testing

// Test utilities; see test_support.hpp. Tests are single-threaded users of these.
#include "support/test_support.hpp"

#include <fcntl.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstddef>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>
#include <stdexcept>
#include <thread>

namespace spotvisor::testing {

TempDir::TempDir() {
  const char* base = std::getenv("TMPDIR");
  std::string templ = std::string(base ? base : "/tmp") + "/spotvisor-test-XXXXXX";
  if (mkdtemp(templ.data()) == nullptr) std::abort();
  path_ = templ;
}

TempDir::~TempDir() {
  std::error_code ec;
  std::filesystem::remove_all(path_, ec);
}

bool WaitUntil(const std::function<bool()>& done, std::chrono::milliseconds timeout) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (std::chrono::steady_clock::now() < deadline) {
    if (done()) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  return done();
}

bool ProcessAlive(pid_t pid) {
  std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
  if (!stat) return false;
  std::string line;
  std::getline(stat, line);
  const auto close = line.rfind(')');
  return close != std::string::npos && close + 2 < line.size() && line[close + 2] != 'Z';
}

void WriteFile(const std::filesystem::path& path, const std::string& text) {
  std::ofstream(path, std::ios::binary) << text;
}

std::string ReadFile(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

std::size_t Count(const std::string& text, const std::string& needle) {
  std::size_t n = 0;
  for (auto at = text.find(needle); at != std::string::npos; at = text.find(needle, at + 1)) ++n;
  return n;
}

std::vector<std::string> ReadLines(const std::filesystem::path& path) {
  std::vector<std::string> lines;
  std::ifstream in(path);
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  return lines;
}

void WriteValidCheckpoint(const std::filesystem::path& dir) {
  std::filesystem::create_directories(dir);
  const std::string header = R"({"w":{"dtype":"U8","shape":[4],"data_offsets":[0,4]}})";
  std::string bytes(8, '\0');
  for (int i = 0; i < 8; ++i) bytes[i] = static_cast<char>((header.size() >> (8 * i)) & 0xff);
  WriteFile(dir / "model.safetensors", bytes + header + "abcd");
}

Spawned Spawn(const std::vector<std::string>& argv, const std::filesystem::path& output,
              const std::map<std::string, std::string>& env) {
  Spawned s;
  s.output = output;
  std::vector<char*> args;
  for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  s.pid = fork();
  if (s.pid == 0) {
    const int fd = open(output.c_str(), O_WRONLY | O_CREAT | O_APPEND, 0644);
    dup2(fd, 1);
    dup2(fd, 2);
    const int null = open("/dev/null", O_RDONLY);
    dup2(null, 0);
    for (const auto& [k, v] : env) setenv(k.c_str(), v.c_str(), 1);
    execv(args[0], args.data());
    _exit(127);
  }
  return s;
}

int WaitExit(pid_t pid, std::chrono::milliseconds timeout) {
  int status = 0;
  const bool done = WaitUntil([&] { return waitpid(pid, &status, WNOHANG) == pid; }, timeout);
  if (!done) return -1;
  if (WIFEXITED(status)) return WEXITSTATUS(status);
  if (WIFSIGNALED(status)) return 128 + WTERMSIG(status);
  return -1;
}

int RunSpotvisor(const std::vector<std::string>& args, std::string* output, std::chrono::milliseconds timeout) {
  TempDir dir;
  std::vector<std::string> argv{SPOTVISOR_BINARY};
  argv.insert(argv.end(), args.begin(), args.end());
  const Spawned s = Spawn(argv, dir / "out.txt");
  const int code = WaitExit(s.pid, timeout);
  if (code == -1) {
    kill(s.pid, SIGKILL);
    waitpid(s.pid, nullptr, 0);
  }
  if (output) *output = ReadFile(s.output);
  return code;
}

NotifySocket::NotifySocket(const std::string& name) {
  fd_ = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  if (fd_ < 0 || name.empty() || name.size() >= sizeof addr.sun_path) {
    throw std::runtime_error("NotifySocket: cannot create a socket for " + name);
  }
  std::memcpy(addr.sun_path, name.data(), name.size());
  const bool abstract = name[0] == '@';
  if (abstract) addr.sun_path[0] = '\0';
  const auto len = static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + name.size() + (abstract ? 0 : 1));
  if (bind(fd_, reinterpret_cast<sockaddr*>(&addr), len) != 0) {
    throw std::runtime_error("NotifySocket: cannot bind " + name + ": " + std::strerror(errno));
  }
}

NotifySocket::~NotifySocket() {
  if (fd_ >= 0) close(fd_);
}

std::string NotifySocket::Receive(std::chrono::milliseconds timeout) {
  timeval tv{static_cast<time_t>(timeout.count() / 1000), static_cast<suseconds_t>(timeout.count() % 1000 * 1000)};
  setsockopt(fd_, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  char buf[4096];
  const ssize_t n = recv(fd_, buf, sizeof buf, 0);
  return n > 0 ? std::string(buf, static_cast<std::size_t>(n)) : std::string("<nothing>");
}

}  // namespace spotvisor::testing

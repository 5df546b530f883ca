// The trainer stand-in that integration tests supervise: a real process whose behaviour is
// chosen by flags (exit N, die by a signal, ignore SIGTERM, spawn grandchildren, write a
// checkpoint on SIGUSR1/SIGTERM, sleep). Standalone on purpose: it links nothing of ours.
//
//   child_helper --mode=exit|signal|ignore-term|sleep|grandchildren|checkpoint|periodic|close-output|in-place
//                [--code=N] [--signal=N] [--sleep-ms=N] [--record=FILE] [--ready=FILE]
//                [--ckpt-dir=DIR] [--step=N] [--grandchildren=N] [--pids=FILE]
//                [--fail-attempts=N] [--timestamps=FILE] [--every-ms=N] [--max-saves=N] [--saves=N] [--go=FILE]
//                [extra args...]
//
// --mode=in-place is the common single-file trainer: it saves <ckpt-dir>/model.safetensors
// over the same file (truncate, write) --saves times, then waits for --go to exist and dies
// by SIGKILL half-way through the next save (a torn file). Started with
// --resume_from=PATH it records "resumed=<the tag in PATH>" and exits 0.
//
// --mode=checkpoint with --go=FILE installs its handlers only once FILE exists (a trainer
// still importing its libraries: until then SIGTERM kills it); with --dies-on-stop it catches
// only SIGUSR1 (a save on request) and SIGTERM kills it.
#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iterator>
#include <string>
#include <thread>
#include <vector>

namespace {

volatile sig_atomic_t g_checkpoint = 0;  // SIGUSR1 seen
volatile sig_atomic_t g_stop = 0;        // SIGTERM seen

struct Options {
  std::string mode = "sleep";
  int code = 0;
  int signal = SIGKILL;
  long sleep_ms = -1;  // -1: forever
  std::string record, ready, ckpt_dir, pids;
  long step = 1;
  int grandchildren = 2;
  std::string timestamps;     // append "start <ns>" / "exit <ns>" (CLOCK_REALTIME) for benchmarks
  int fail_attempts = -1;     // with --mode=exit: fail only while SPOTVISOR_ATTEMPT <= this
  long every_ms = 1000;       // with --mode=periodic: the save interval
  long max_saves = -1;        // with --mode=periodic: no save after this many (-1: no limit)
  int saves = 2;              // --mode=in-place: complete saves before the torn one
  std::string go;             // --mode=in-place: the torn save waits for this file
  std::string resume_from;    // --resume_from=PATH
  bool dies_on_stop = false;  // --mode=checkpoint: SIGTERM keeps its default action
};

Options Parse(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    const auto eq = a.find('=');
    const std::string key = a.substr(0, eq), value = eq == std::string::npos ? "" : a.substr(eq + 1);
    if (key == "--mode") o.mode = value;
    else if (key == "--code") o.code = std::atoi(value.c_str());
    else if (key == "--signal") o.signal = std::atoi(value.c_str());
    else if (key == "--sleep-ms") o.sleep_ms = std::atol(value.c_str());
    else if (key == "--record") o.record = value;
    else if (key == "--ready") o.ready = value;
    else if (key == "--ckpt-dir") o.ckpt_dir = value;
    else if (key == "--step") o.step = std::atol(value.c_str());
    else if (key == "--grandchildren") o.grandchildren = std::atoi(value.c_str());
    else if (key == "--pids") o.pids = value;
    else if (key == "--timestamps") o.timestamps = value;
    else if (key == "--fail-attempts") o.fail_attempts = std::atoi(value.c_str());
    else if (key == "--saves") o.saves = std::atoi(value.c_str());
    else if (key == "--go") o.go = value;
    else if (key == "--resume_from") o.resume_from = value;
    else if (key == "--dies-on-stop") o.dies_on_stop = true;
    else if (key == "--every-ms") o.every_ms = std::atol(value.c_str());
    else if (key == "--max-saves") o.max_saves = std::atol(value.c_str());
  }
  return o;
}

// One line per start: pid, pgid, argv, SPOTVISOR_* env, blocked signals, SIGTERM handler.
void Record(const Options& o, int argc, char** argv) {
  if (o.record.empty()) return;
  std::string line =
      "pid=" + std::to_string(getpid()) + " pgid=" + std::to_string(getpgrp()) + " ppid=" + std::to_string(getppid());
  sigset_t mask;
  sigprocmask(SIG_BLOCK, nullptr, &mask);
  int blocked = 0;
  for (int s = 1; s < 32; ++s) blocked += sigismember(&mask, s) == 1;
  struct sigaction term {};
  sigaction(SIGTERM, nullptr, &term);
  line += " blocked=" + std::to_string(blocked) + " term_default=" + std::to_string(term.sa_handler == SIG_DFL ? 1 : 0);
  for (const char* name :
       {"SPOTVISOR_RESUME_FROM", "SPOTVISOR_RESUME_STEP", "SPOTVISOR_ATTEMPT", "SPOTVISOR_RESTART_COUNT",
        "SPOTVISOR_JOB", "SPOTVISOR_CHECKPOINT_DIR", "SPOTVISOR_NOTICE_FILE", "SPOTVISOR_NODE_RANK", "SPOTVISOR_NNODES",
        "SPOTVISOR_EPOCH", "HELPER_ENV", "PYTHONUNBUFFERED"}) {
    const char* v = std::getenv(name);
    line += std::string(" ") + name + "=" + (v ? v : "");
  }
  char cwd[4096];
  line += std::string(" cwd=") + (getcwd(cwd, sizeof cwd) ? cwd : "?");
  line += " argv=";
  for (int i = 1; i < argc; ++i) line += std::string(i > 1 ? "|" : "") + argv[i];
  std::ofstream(o.record, std::ios::app) << line << "\n";
}

void Stamp(const std::string& file, const char* what) {
  if (file.empty()) return;
  timespec ts{};
  clock_gettime(CLOCK_REALTIME, &ts);
  const std::string line = std::string(what) + " " + std::to_string(ts.tv_sec * 1000000000LL + ts.tv_nsec) + "\n";
  const int fd = open(file.c_str(), O_WRONLY | O_CREAT | O_APPEND, 0644);
  if (fd >= 0) {
    [[maybe_unused]] ssize_t n = write(fd, line.data(), line.size());
    close(fd);
  }
}

// Writes our pid to `path` atomically (temp name, then rename): a test that polls for the
// file's existence must never read it empty.
void Touch(const std::string& path) {
  if (path.empty()) return;
  const std::string tmp = path + ".tmp-" + std::to_string(getpid());
  std::ofstream(tmp) << getpid() << "\n";
  std::rename(tmp.c_str(), path.c_str());
}

void SleepMs(long ms) { std::this_thread::sleep_for(std::chrono::milliseconds(ms)); }

// Writes <ckpt_dir>/ckpt_step<step> atomically (temp name, then rename).
void WriteCheckpoint(const Options& o, long step) {
  if (o.ckpt_dir.empty()) return;
  const std::string final_path = o.ckpt_dir + "/ckpt_step" + std::to_string(step);
  const std::string tmp = o.ckpt_dir + "/.tmp-ckpt_step" + std::to_string(step);
  {
    std::ofstream out(tmp);
    out << "step " << step << "\n";
  }
  std::rename(tmp.c_str(), final_path.c_str());
}

// A safetensors file (8-byte little-endian header length, JSON header, data) whose 8
// data bytes are `tag`: what spotvisor's validator reads as complete, or not when torn.
std::string SafetensorsBytes(std::string tag) {
  tag.resize(8, '.');
  const std::string header = R"({"w":{"dtype":"U8","shape":[8],"data_offsets":[0,8]}})";
  std::string bytes(8, '\0');
  for (int i = 0; i < 8; ++i) bytes[i] = static_cast<char>((header.size() >> (8 * i)) & 0xff);
  return bytes + header + tag;
}

// Saves over the file in place as torch.save does: open with truncation, write, close.
// `torn`: only the first half, then SIGKILL, as when the machine dies mid-save.
void SaveInPlace(const std::string& path, const std::string& bytes, bool torn) {
  const int fd = open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  if (fd < 0) return;
  const std::size_t n = torn ? bytes.size() / 2 : bytes.size();
  [[maybe_unused]] ssize_t w = write(fd, bytes.data(), n);
  if (torn) {
    fsync(fd);
    raise(SIGKILL);
  }
  close(fd);
}

int InPlace(const Options& o) {
  if (!o.resume_from.empty()) {
    std::ifstream in(o.resume_from, std::ios::binary);
    const std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    std::ofstream(o.record, std::ios::app)
        << "resumed=" << (bytes.size() >= 8 ? bytes.substr(bytes.size() - 8) : "") << "\n";
    return 0;
  }
  const std::string path = o.ckpt_dir + "/model.safetensors";
  for (int save = 1; save <= o.saves; ++save) {
    SaveInPlace(path, SafetensorsBytes("save" + std::to_string(save)), false);
    SleepMs(50);
  }
  while (access(o.go.c_str(), F_OK) != 0) SleepMs(20);
  SaveInPlace(path, SafetensorsBytes("save" + std::to_string(o.saves + 1)), true);
  return 1;  // not reached: SIGKILL
}

void Wait(const Options& o) {
  if (o.sleep_ms < 0) {
    for (;;) pause();
  }
  SleepMs(o.sleep_ms);
}

}  // namespace

int main(int argc, char** argv) {
  const Options o = Parse(argc, argv);
  Stamp(o.timestamps, "start");
  Record(o, argc, argv);

  if (o.mode == "exit") {
    Touch(o.ready);
    if (o.sleep_ms > 0) SleepMs(o.sleep_ms);
    const char* attempt = std::getenv("SPOTVISOR_ATTEMPT");
    if (o.fail_attempts >= 0 && attempt && std::atoi(attempt) > o.fail_attempts) return 0;
    Stamp(o.timestamps, "exit");
    return o.code;
  }
  if (o.mode == "signal") {
    Touch(o.ready);
    if (o.sleep_ms > 0) SleepMs(o.sleep_ms);
    signal(o.signal, SIG_DFL);
    raise(o.signal);
    return 99;
  }
  if (o.mode == "ignore-term") {
    signal(SIGTERM, SIG_IGN);
    signal(SIGINT, SIG_IGN);
    Touch(o.ready);
    Wait(o);
    return o.code;
  }
  if (o.mode == "grandchildren") {
    std::string pids;
    for (int i = 0; i < o.grandchildren; ++i) {
      const pid_t pid = fork();
      if (pid == 0) {
        signal(SIGTERM, SIG_IGN);
        for (;;) pause();
      }
      pids += std::to_string(pid) + "\n";
    }
    if (!o.pids.empty()) std::ofstream(o.pids) << pids;
    Touch(o.ready);
    Wait(o);
    return o.code;
  }
  if (o.mode == "checkpoint") {
    bool handlers = false;
    const auto install = [&handlers, &o] {
      struct sigaction sa {};
      sa.sa_handler = [](int s) { (s == SIGUSR1 ? g_checkpoint : g_stop) = 1; };
      sigaction(SIGUSR1, &sa, nullptr);
      if (!o.dies_on_stop) sigaction(SIGTERM, &sa, nullptr);
      handlers = true;
    };
    if (o.go.empty()) install();
    Touch(o.ready);
    long step = o.step;
    // A trainer resumes where its checkpoint left off: a restarted attempt never saves a
    // step below the one it resumed from (a timing-dependent step count would, on a busy CPU).
    if (const char* resumed = std::getenv("SPOTVISOR_RESUME_STEP"); resumed && *resumed) {
      step = std::max(step, std::atol(resumed));
    }
    const auto start = std::chrono::steady_clock::now();
    for (;;) {
      SleepMs(5);
      ++step;
      if (!handlers && access(o.go.c_str(), F_OK) == 0) install();
      if (g_checkpoint) g_checkpoint = 0, WriteCheckpoint(o, step);
      if (g_stop) {
        WriteCheckpoint(o, step);
        return o.code;
      }
      if (o.sleep_ms >= 0 && std::chrono::steady_clock::now() - start > std::chrono::milliseconds(o.sleep_ms)) {
        return o.code;
      }
    }
  }
  if (o.mode == "in-place") return InPlace(o);
  if (o.mode == "periodic") {  // a script as it is: no handler at all, a save every --every-ms
    Touch(o.ready);
    long step = o.step;
    long saves = 0;
    auto saved = std::chrono::steady_clock::now();
    for (;;) {
      SleepMs(5);
      std::printf("step=%ld\n", ++step);
      std::fflush(stdout);
      if (o.max_saves >= 0 && saves >= o.max_saves) continue;
      if (std::chrono::steady_clock::now() - saved >= std::chrono::milliseconds(o.every_ms)) {
        ++saves;
        WriteCheckpoint(o, step);
        saved = std::chrono::steady_clock::now();
      }
    }
  }
  if (o.mode == "close-output") {  // says one line on each stream, closes both, keeps running
    std::printf("step=1 before closing stdout\n");
    std::fflush(stdout);
    std::fprintf(stderr, "closing stderr too\n");
    close(STDOUT_FILENO);
    close(STDERR_FILENO);
    Touch(o.ready);
    Wait(o);
    return o.code;
  }
  // sleep: default dispositions, as a trainer that never installed a handler.
  Touch(o.ready);
  Wait(o);
  return o.code;
}

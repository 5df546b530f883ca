// The termination message (see termination_message.hpp): what the run ended with, in one
// JSON line that fits the kubelet's 4 KiB, and the observer that writes it at exit.
// Pure builder; the writer and observer run on the io thread at OnExit.
#include "spotvisor/report/termination_message.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <nlohmann/json.hpp>

#include "spotvisor/checkpoint/resume_selector.hpp"
#include "spotvisor/log/log.hpp"
#include "spotvisor/report/report.hpp"
#include "spotvisor/state/journal.hpp"

namespace spotvisor::report {

using log::Log;
using log::LogLevel;
using log::Quote;
namespace {

using nlohmann::json;

constexpr const char* kEllipsis = "...";

std::string Dump(const json& j) { return j.dump(-1, ' ', false, json::error_handler_t::replace) + "\n"; }

// `s` cut to at most `bytes` bytes (ellipsis included) at a UTF-8 character boundary.
std::string Shorten(const std::string& s, std::size_t bytes) {
  const std::size_t mark = std::strlen(kEllipsis);
  if (s.size() <= bytes) return s;
  if (bytes <= mark) return std::string(kEllipsis).substr(0, bytes);
  std::size_t cut = bytes - mark;
  while (cut > 0 && (static_cast<unsigned char>(s[cut]) & 0xC0) == 0x80) --cut;
  return s.substr(0, cut) + kEllipsis;
}

// The longest string value anywhere in `j` (by its length), or null.
json* LongestString(json& j) {
  json* best = nullptr;
  auto visit = [&best](auto& self, json& node) -> void {
    if (node.is_string()) {
      if (best == nullptr || node.get_ref<const std::string&>().size() > best->get_ref<const std::string&>().size()) {
        best = &node;
      }
    } else if (node.is_structured()) {
      for (auto& child : node) self(self, child);
    }
  };
  visit(visit, j);
  return best;
}

json Fields(int exit_code, const std::string& why, const json& report, const std::string& checkpoint) {
  json m{{"exit_code", exit_code}, {"why", why}};
  if (!report.is_object()) return m;
  m["job"] = report.value("job", "");
  if (const auto it = report.find("attempts"); it != report.end() && it->is_array()) {
    m["attempts"] = it->size();
    if (!it->empty()) m["last_outcome"] = it->back().value("outcome", "");
  }
  if (const auto it = report.find("restarts"); it != report.end()) m["restarts"] = *it;
  json ckpt = nullptr;
  if (!checkpoint.empty()) {
    ckpt = json{{"name", checkpoint}};
    if (report.contains("checkpoints")) ckpt["step"] = report["checkpoints"].value("newest_good_step", json(nullptr));
  }
  m["checkpoint"] = ckpt;
  if (const auto it = report.find("cost"); it != report.end() && it->is_object()) {
    m["cost"] = json{{"currency", it->value("currency", "")},
                     {"low", it->value("total_low", json(nullptr))},
                     {"high", it->value("total_high", json(nullptr))},
                     {"text", it->value("total_text", "")}};
  }
  return m;
}

}  // namespace

std::string TerminationMessage(int exit_code, const std::string& why, const json& report, const std::string& checkpoint,
                               std::size_t limit) {
  json m = Fields(exit_code, why, report, checkpoint);
  std::string line = Dump(m);
  // Shorten the longest string until it fits; a string escaped in JSON can take up to 6x
  // its bytes, so each round cuts by the overflow at least and re-measures.
  while (line.size() > limit) {
    json* longest = LongestString(m);
    if (longest == nullptr || longest->get_ref<const std::string&>().size() <= 16) break;
    const std::string& s = longest->get_ref<const std::string&>();
    const std::size_t over = line.size() - limit;
    // Cut in proportion to how the string grows when escaped (control characters: 6x).
    const std::size_t escaped = Dump(json(s)).size();
    const std::size_t target = escaped > over ? escaped - over : 0;
    const std::size_t keep = std::max<std::size_t>(16, s.size() * target / escaped);
    *longest = Shorten(s, std::min(keep, s.size() - 1));
    line = Dump(m);
  }
  // Still too long (many small fields): drop the optional ones, the least telling first.
  for (const char* key : {"restarts", "cost", "checkpoint", "last_outcome", "attempts", "job"}) {
    if (line.size() <= limit) break;
    m.erase(key);
    line = Dump(m);
  }
  if (line.size() > limit) {  // only a tiny limit gets here
    line = Dump(json{{"exit_code", exit_code}});
    if (line.size() > limit) line = line.substr(0, limit);
  }
  return line;
}

Status WriteTerminationLog(const std::filesystem::path& path, const std::string& text) {
  const int fd = open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return Error{"cannot write the termination log " + path.string() + ": " + std::strerror(errno)};
  std::size_t done = 0;
  while (done < text.size()) {
    const ssize_t n = write(fd, text.data() + done, text.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      const int err = errno;
      close(fd);
      return Error{"cannot write the termination log " + path.string() + ": " + std::strerror(err)};
    }
    done += static_cast<std::size_t>(n);
  }
  if (close(fd) != 0) return Error{"cannot write the termination log " + path.string() + ": " + std::strerror(errno)};
  return Ok{};
}

namespace {

class TerminationLogObserver final : public supervisor::RunObserver {
 public:
  explicit TerminationLogObserver(const config::JobConfig& job) : job_(job) {}

  void OnStart(supervisor::RunControl& control) override { clock_ = &control.clock(); }

  void OnExit(int code, const std::string& message) override {
    const auto& dir = job_.telemetry.state_dir;
    json report = nullptr;
    const std::int64_t now_ms = UnixMillis((clock_ ? *clock_ : SystemClock()).WallNow());
    if (auto r = BuildReport(dir, now_ms)) report = std::move(*r);
    // The newest checkpoint a next start can resume from, at the structure level (headers and
    // sizes, no hashing: the stop window may be short; the next start validates fully). No
    // quarantine, no links: nothing on disk changes here.
    config::JobConfig quick = job_;
    quick.checkpoints.validate = config::ValidateLevel::kStructure;
    quick.checkpoints.quarantine = false;
    quick.checkpoints.latest_link.clear();
    quick.checkpoints.rewrite_hints = false;
    std::string checkpoint;
    if (auto selection = checkpoint::MakeResumeSelector(quick)->SelectForResume(); selection && selection->chosen) {
      checkpoint = selection->chosen->path.filename().string();
      if (report.is_object()) report["checkpoints"]["newest_good_step"] = selection->chosen->step;
    }
    const std::string line = TerminationMessage(code, message, report, checkpoint);
    const auto& path = *job_.telemetry.termination_log;
    if (Status s = WriteTerminationLog(path, line); !s) {
      Log(LogLevel::kError, "event=termination_log_failed error=" + Quote(s.error().message));
      return;
    }
    Log(LogLevel::kInfo,
        "event=termination_log_written path=" + Quote(path.string()) + " bytes=" + std::to_string(line.size()));
  }

 private:
  const config::JobConfig& job_;  // not owned; outlives the run
  Clock* clock_ = nullptr;        // the run's, from OnStart (an exit before it: the machine's)
};

}  // namespace

std::unique_ptr<supervisor::RunObserver> MakeTerminationLogObserver(const config::JobConfig& job) {
  if (!job.telemetry.termination_log) return nullptr;
  return std::make_unique<TerminationLogObserver>(job);
}

}  // namespace spotvisor::report

// Trigger-file watcher. The notice id is the path plus the file's mtime, so rewriting the
// file is a new notice while the same file seen by many polls is one. Writers should
// create the file atomically (write elsewhere, rename) so the content is complete.
#include "file_watcher.hpp"

#include <fstream>
#include <system_error>

#include "spotvisor/log/log.hpp"
#include "spotvisor/preemption/notice_parsers.hpp"

namespace spotvisor::preemption {

using log::Log;
using log::LogLevel;
using log::Quote;
namespace {

constexpr std::size_t kMaxContent = 64 * 1024;
constexpr const char* kSlot = "file";

}  // namespace

FileWatcher::FileWatcher(boost::asio::io_context& io, Clock& clock, const config::ProviderSection& cfg)
    : clock_(clock), timer_(clock.MakeTimer(io)), cfg_(cfg), condition_(clock, "file", cfg.file.string()) {}

void FileWatcher::OnStart() {
  Log(LogLevel::kInfo, "event=watcher_start provider=file path=" + Quote(cfg_.file.string()) +
                           " poll_interval_ms=" + std::to_string(cfg_.poll_interval.count()));
  Poll();
}

void FileWatcher::OnStop() { timer_->Cancel(); }

void FileWatcher::Poll() {
  std::error_code ec;
  const auto status = std::filesystem::status(cfg_.file, ec);
  if (ec && ec != std::errc::no_such_file_or_directory && ec != std::errc::not_a_directory) {
    condition_.Bad("unreadable", "cannot stat: " + ec.message());
  } else if (!std::filesystem::exists(status)) {
    condition_.Good();
    if (!EmitAbsent(kSlot)) return;
  } else if (!book().Active(kSlot)) {
    condition_.Good();
    const auto mtime = std::filesystem::last_write_time(cfg_.file, ec);
    if (!Emit(kSlot, Read(ec ? std::filesystem::file_time_type{} : mtime))) return;
  }
  if (stopped()) return;
  timer_->After(cfg_.poll_interval, [this] { Poll(); });
}

Notice FileWatcher::Read(const std::filesystem::file_time_type& mtime) {
  Notice n;
  n.provider = "file";
  n.kind = "file";
  n.action = NoticeAction::kStop;
  n.id = "file-" + cfg_.file.string() + "-" + std::to_string(mtime.time_since_epoch().count());
  std::ifstream in(cfg_.file, std::ios::binary);
  std::string content(kMaxContent, '\0');
  in.read(content.data(), static_cast<std::streamsize>(content.size()));
  content.resize(static_cast<std::size_t>(std::max<std::streamsize>(in.gcount(), 0)));
  n.detail = OneLine(content);
  if (!TrimSpace(content).empty()) {
    auto parsed = ParseFileNotice(content);
    if (parsed) {
      n.deadline = parsed->deadline;
      if (parsed->kind) n.kind = *parsed->kind;
      if (parsed->action) n.action = *parsed->action;
    } else {
      condition_.Bad("bad_content", parsed.error().message + " (the notice stands)");
    }
  }
  if (!n.deadline) n.deadline = DeadlineIn(clock_.WallNow(), cfg_.default_window);
  return n;
}

}  // namespace spotvisor::preemption

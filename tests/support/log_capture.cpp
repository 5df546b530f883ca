// Test support; see log_capture.hpp.
#include "support/log_capture.hpp"

#include <spdlog/sinks/base_sink.h>
#include <spdlog/sinks/ringbuffer_sink.h>
#include <spdlog/spdlog.h>

#include <cstdio>
#include <cstdlib>
#include <mutex>

namespace spotvisor::testing {

namespace {

// Hands each formatted line to the test's callback as it is logged.
class CallbackSink final : public spdlog::sinks::base_sink<std::mutex> {
 public:
  void Set(std::function<void(const std::string&)> fn) {
    std::lock_guard lock(mutex_);
    on_line_ = std::move(fn);
  }

 protected:
  void sink_it_(const spdlog::details::log_msg& msg) override {
    if (!on_line_) return;
    spdlog::memory_buf_t formatted;
    formatter_->format(msg, formatted);
    std::string line = fmt::to_string(formatted);
    while (!line.empty() && (line.back() == '\n' || line.back() == '\r')) line.pop_back();
    on_line_(line);
  }
  void flush_() override {}

 private:
  std::function<void(const std::string&)> on_line_;
};

}  // namespace

struct LogCapture::Impl {
  std::shared_ptr<spdlog::sinks::ringbuffer_sink_mt> sink = std::make_shared<spdlog::sinks::ringbuffer_sink_mt>(4096);
  std::shared_ptr<CallbackSink> callback = std::make_shared<CallbackSink>();
  std::shared_ptr<spdlog::logger> previous;
};

LogCapture::LogCapture() : impl_(std::make_unique<Impl>()) {
  impl_->previous = spdlog::default_logger();
  auto logger = std::make_shared<spdlog::logger>("capture", spdlog::sinks_init_list{impl_->sink, impl_->callback});
  logger->set_level(spdlog::level::debug);
  impl_->sink->set_pattern("%l %v");
  impl_->callback->set_pattern("%l %v");
  spdlog::set_default_logger(logger);
}

LogCapture::~LogCapture() {
  if (std::getenv("SPOTVISOR_SHOW_LOGS") != nullptr) std::fprintf(stderr, "%s", Joined().c_str());
  spdlog::set_default_logger(impl_->previous);
}

std::string LogCapture::Joined() const {
  std::string out;
  for (const auto& line : Lines()) out += line + "\n";
  return out;
}

std::vector<std::string> LogCapture::Lines() const { return impl_->sink->last_formatted(); }

void LogCapture::OnLine(std::function<void(const std::string&)> fn) { impl_->callback->Set(std::move(fn)); }

int LogCapture::Count(const std::string& needle) const {
  int n = 0;
  for (const auto& line : Lines()) n += line.find(needle) != std::string::npos ? 1 : 0;
  return n;
}

}  // namespace spotvisor::testing

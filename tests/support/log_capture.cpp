// Test support; see log_capture.hpp.
#include "support/log_capture.hpp"

#include <spdlog/sinks/ringbuffer_sink.h>
#include <spdlog/spdlog.h>

#include <cstdio>
#include <cstdlib>

namespace spotvisor::testing {

struct LogCapture::Impl {
  std::shared_ptr<spdlog::sinks::ringbuffer_sink_mt> sink = std::make_shared<spdlog::sinks::ringbuffer_sink_mt>(4096);
  std::shared_ptr<spdlog::logger> previous;
};

LogCapture::LogCapture() : impl_(std::make_unique<Impl>()) {
  impl_->previous = spdlog::default_logger();
  auto logger = std::make_shared<spdlog::logger>("capture", impl_->sink);
  logger->set_level(spdlog::level::debug);
  impl_->sink->set_pattern("%l %v");
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

int LogCapture::Count(const std::string& needle) const {
  int n = 0;
  for (const auto& line : Lines()) n += line.find(needle) != std::string::npos ? 1 : 0;
  return n;
}

}  // namespace spotvisor::testing

// GPU sampling; see gpu_sampler.hpp.
#include "gpu_sampler.hpp"

#include <algorithm>
#include <boost/asio/post.hpp>

#include "spotvisor/log/log.hpp"

namespace spotvisor::telemetry {

using log::Log;
using log::LogLevel;
using log::Quote;

namespace asio = boost::asio;

GpuSampler::GpuSampler(asio::io_context& io, Clock& clock, Duration interval, GpuInfo& gpu,
                       std::function<void()> changed)
    : io_(io), clock_(clock), interval_(interval), gpu_(gpu), changed_(std::move(changed)) {}

GpuSampler::~GpuSampler() { pool_.join(); }

void GpuSampler::Start() {
  if (interval_.count() <= 0) return;
  timer_ = clock_.MakeTimer(io_);
  // Each trip to the pool holds the clock's BackgroundWork until its answer is posted: a
  // virtual clock does not move past it.
  asio::post(pool_, [this, working = clock_.BackgroundWork()]() mutable {
    auto nvml = Nvml::Load();
    asio::post(io_, [this, nvml = std::make_shared<decltype(nvml)>(std::move(nvml))]() mutable {
      if (!*nvml) {
        gpu_.available = false;
        gpu_.reason = (*nvml).error().message;
        Log(LogLevel::kInfo, "event=gpu_unavailable reason=" + Quote(gpu_.reason));
        changed_();
        return;
      }
      nvml_ = std::move(**nvml);
      gpu_.available = true;
      gpu_.driver = nvml_->driver_version();
      Log(LogLevel::kInfo,
          "event=gpu_found devices=" + std::to_string(nvml_->device_count()) + " driver=" + gpu_.driver);
      Sample();
    });
    working.reset();
  });
}

void GpuSampler::Stop() { timer_.reset(); }

void GpuSampler::Sample() {
  asio::post(pool_, [this, working = clock_.BackgroundWork()]() mutable {
    auto samples = nvml_->Sample();
    asio::post(io_, [this, samples = std::move(samples)] {
      gpus_ = samples;
      gpu_.models.clear();
      for (const auto& g : gpus_) {
        gpu_.models.push_back(g.name);
        gpu_.memory_total_bytes = std::max(gpu_.memory_total_bytes, g.memory_total);
        gpu_.peak_vram_bytes = std::max(gpu_.peak_vram_bytes, g.memory_used);
      }
    });
    working.reset();
  });
  if (!timer_) return;
  timer_->After(interval_, [this] { Sample(); });
}

}  // namespace spotvisor::telemetry

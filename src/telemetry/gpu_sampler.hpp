// GPU telemetry during a run: loads NVML and samples every telemetry.gpu_interval, keeping
// the models, the largest memory and the peak VRAM in the run record's GpuInfo. NVML calls
// run on the sampler's own thread; results come back to the io thread, which owns the rest.
// The period is a timer of the run's clock.
#pragma once

#include <boost/asio/io_context.hpp>
#include <boost/asio/thread_pool.hpp>
#include <functional>
#include <memory>
#include <optional>
#include <vector>

#include "spotvisor/telemetry/nvml.hpp"
#include "spotvisor/telemetry/run_ledger.hpp"
#include "spotvisor/util/clock.hpp"

namespace spotvisor::telemetry {

class GpuSampler {
 public:
  // `gpu` (the run record's) and `clock` must outlive the sampler; `changed` runs after it
  // learned whether there is a GPU (the record is worth saving then).
  GpuSampler(boost::asio::io_context& io, Clock& clock, Duration interval, GpuInfo& gpu, std::function<void()> changed);
  ~GpuSampler();  // waits for an NVML call in progress

  void Start();  // io thread; nothing when the interval is 0
  void Stop();   // io thread: no more samples

  bool sampled() const { return nvml_ != nullptr; }                // io thread
  const std::vector<GpuSample>& samples() const { return gpus_; }  // io thread: the latest

 private:
  void Sample();

  boost::asio::io_context& io_;       // the driver's loop
  Clock& clock_;                      // the run's
  Duration interval_;                 // telemetry.gpu_interval
  GpuInfo& gpu_;                      // not owned
  std::function<void()> changed_;     // io thread
  std::unique_ptr<Timer> timer_;      // the sampling period
  std::unique_ptr<Nvml> nvml_;        // used on pool_ only after load
  std::vector<GpuSample> gpus_;       // io thread
  boost::asio::thread_pool pool_{1};  // NVML calls (declared last: joined first)
};

}  // namespace spotvisor::telemetry

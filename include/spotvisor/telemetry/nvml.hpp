// GPU telemetry through NVML, loaded at run time with dlopen (no build dependency, no
// failure without a GPU). Calls can take milliseconds: call from a worker thread, one at
// a time.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "spotvisor/util/result.hpp"

namespace spotvisor::telemetry {

struct GpuSample {
  unsigned index = 0;
  std::string name;                    // "NVIDIA H100 80GB HBM3"
  double utilization = -1;             // 0..1; -1 when NVML could not tell
  std::uint64_t memory_used = 0;       // bytes
  std::uint64_t memory_total = 0;      // bytes
  int temperature_c = -1;              // -1 when unknown
  std::uint64_t throttle_reasons = 0;  // NVML clocks-event reason bits
  bool throttle_known = false;
};

class Nvml {
 public:
  // Loads `library`, initialises NVML and counts devices. The Error says why there is no
  // GPU telemetry (library absent, init failed, no device), for one log line.
  static Result<std::unique_ptr<Nvml>> Load(const std::string& library = "libnvidia-ml.so.1");
  ~Nvml();
  Nvml(const Nvml&) = delete;
  Nvml& operator=(const Nvml&) = delete;

  std::vector<GpuSample> Sample() const;
  const std::string& driver_version() const { return driver_version_; }
  unsigned device_count() const { return count_; }

 private:
  struct Api;
  Nvml(void* handle, std::unique_ptr<Api> api);
  void* handle_;                // dlopen handle
  std::unique_ptr<Api> api_;    // resolved entry points
  unsigned count_ = 0;          // devices
  std::string driver_version_;  // "550.54.15"
};

// Names of the set bits of an NVML throttle-reason mask ("hw_thermal_slowdown", ...).
std::vector<std::string> ThrottleReasonNames(std::uint64_t mask);
// Every reason we export, in bit order, with its bit.
const std::vector<std::pair<std::uint64_t, std::string>>& ThrottleReasons();

}  // namespace spotvisor::telemetry

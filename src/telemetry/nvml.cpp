// NVML via dlopen; the few types and entry points we use are declared here, as NVML's
// ABI documents them (nvml.h). See nvml.hpp.
#include "spotvisor/telemetry/nvml.hpp"

#include <dlfcn.h>

namespace spotvisor::telemetry {
// Named, not anonymous: Nvml::Api's members use these types, and a type with internal
// linkage inside a class with external linkage is refused when the core compiles in unity
// batches (-Wsubobject-linkage).
namespace nvml_abi {

using NvmlReturn = int;  // NVML_SUCCESS = 0
using NvmlDevice = struct NvmlDeviceOpaque*;
struct NvmlUtilization {
  unsigned int gpu;
  unsigned int memory;
};
struct NvmlMemory {
  unsigned long long total;
  unsigned long long free;
  unsigned long long used;
};
constexpr int kTemperatureGpu = 0;  // NVML_TEMPERATURE_GPU

}  // namespace nvml_abi

using nvml_abi::kTemperatureGpu;
using nvml_abi::NvmlDevice;
using nvml_abi::NvmlMemory;
using nvml_abi::NvmlReturn;
using nvml_abi::NvmlUtilization;

struct Nvml::Api {
  NvmlReturn (*init)() = nullptr;
  NvmlReturn (*shutdown)() = nullptr;
  NvmlReturn (*count)(unsigned int*) = nullptr;
  NvmlReturn (*handle)(unsigned int, NvmlDevice*) = nullptr;
  NvmlReturn (*name)(NvmlDevice, char*, unsigned int) = nullptr;
  NvmlReturn (*driver)(char*, unsigned int) = nullptr;
  NvmlReturn (*utilization)(NvmlDevice, NvmlUtilization*) = nullptr;
  NvmlReturn (*memory)(NvmlDevice, NvmlMemory*) = nullptr;
  NvmlReturn (*temperature)(NvmlDevice, int, unsigned int*) = nullptr;
  NvmlReturn (*throttle)(NvmlDevice, unsigned long long*) = nullptr;
  const char* (*error_string)(NvmlReturn) = nullptr;
};

namespace {

template <class F>
bool Resolve(void* handle, const char* name, F& out) {
  out = reinterpret_cast<F>(dlsym(handle, name));
  return out != nullptr;
}

}  // namespace

Result<std::unique_ptr<Nvml>> Nvml::Load(const std::string& library) {
  void* handle = dlopen(library.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (handle == nullptr) {
    const char* why = dlerror();
    return Error{"no GPU telemetry: cannot load " + library + " (" + (why ? why : "unknown error") +
                 "); no NVIDIA driver on this machine"};
  }
  auto api = std::make_unique<Api>();
  const bool resolved = Resolve(handle, "nvmlInit_v2", api->init) && Resolve(handle, "nvmlShutdown", api->shutdown) &&
                        Resolve(handle, "nvmlDeviceGetCount_v2", api->count) &&
                        Resolve(handle, "nvmlDeviceGetHandleByIndex_v2", api->handle) &&
                        Resolve(handle, "nvmlDeviceGetName", api->name) &&
                        Resolve(handle, "nvmlSystemGetDriverVersion", api->driver) &&
                        Resolve(handle, "nvmlDeviceGetUtilizationRates", api->utilization) &&
                        Resolve(handle, "nvmlDeviceGetMemoryInfo", api->memory) &&
                        Resolve(handle, "nvmlDeviceGetTemperature", api->temperature) &&
                        Resolve(handle, "nvmlErrorString", api->error_string);
  // Renamed in newer drivers; either spelling will do.
  if (resolved && !Resolve(handle, "nvmlDeviceGetCurrentClocksEventReasons", api->throttle)) {
    Resolve(handle, "nvmlDeviceGetCurrentClocksThrottleReasons", api->throttle);
  }
  if (!resolved) {
    dlclose(handle);
    return Error{"no GPU telemetry: " + library + " lacks NVML entry points (too old a driver?)"};
  }
  if (const NvmlReturn rc = api->init(); rc != 0) {
    const std::string why = api->error_string(rc);
    dlclose(handle);
    return Error{"no GPU telemetry: nvmlInit failed (" + why + ")"};
  }
  std::unique_ptr<Nvml> nvml(new Nvml(handle, std::move(api)));
  if (nvml->count_ == 0) return Error{"no GPU telemetry: NVML sees no GPU"};
  return nvml;
}

Nvml::Nvml(void* handle, std::unique_ptr<Api> api) : handle_(handle), api_(std::move(api)) {
  unsigned int count = 0;
  if (api_->count(&count) == 0) count_ = count;
  char version[96] = {};
  if (api_->driver(version, sizeof version) == 0) driver_version_ = version;
}

Nvml::~Nvml() {
  api_->shutdown();
  dlclose(handle_);
}

std::vector<GpuSample> Nvml::Sample() const {
  std::vector<GpuSample> out;
  for (unsigned i = 0; i < count_; ++i) {
    NvmlDevice device = nullptr;
    if (api_->handle(i, &device) != 0) continue;
    GpuSample s;
    s.index = i;
    char name[128] = {};
    if (api_->name(device, name, sizeof name) == 0) s.name = name;
    NvmlUtilization u{};
    if (api_->utilization(device, &u) == 0) s.utilization = u.gpu / 100.0;
    NvmlMemory m{};
    if (api_->memory(device, &m) == 0) s.memory_used = m.used, s.memory_total = m.total;
    unsigned int t = 0;
    if (api_->temperature(device, kTemperatureGpu, &t) == 0) s.temperature_c = static_cast<int>(t);
    unsigned long long reasons = 0;
    if (api_->throttle && api_->throttle(device, &reasons) == 0) s.throttle_reasons = reasons, s.throttle_known = true;
    out.push_back(std::move(s));
  }
  return out;
}

const std::vector<std::pair<std::uint64_t, std::string>>& ThrottleReasons() {
  static const std::vector<std::pair<std::uint64_t, std::string>> kReasons{{0x1, "gpu_idle"},
                                                                           {0x2, "applications_clocks_setting"},
                                                                           {0x4, "sw_power_cap"},
                                                                           {0x8, "hw_slowdown"},
                                                                           {0x10, "sync_boost"},
                                                                           {0x20, "sw_thermal_slowdown"},
                                                                           {0x40, "hw_thermal_slowdown"},
                                                                           {0x80, "hw_power_brake_slowdown"},
                                                                           {0x100, "display_clock_setting"}};
  return kReasons;
}

std::vector<std::string> ThrottleReasonNames(std::uint64_t mask) {
  std::vector<std::string> out;
  for (const auto& [bit, name] : ThrottleReasons()) {
    if (mask & bit) out.push_back(name);
  }
  return out;
}

}  // namespace spotvisor::telemetry

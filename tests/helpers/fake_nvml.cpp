// A stand-in libnvidia-ml.so.1 for machines without an NVIDIA driver: the NVML entry points
// spotvisor loads (src/telemetry/nvml.cpp), answering for two fixed GPUs with known values.
// Tests put its directory on LD_LIBRARY_PATH so that spotvisor's dlopen finds it; the real
// driver's library is checked on a GPU machine. C ABI, as nvml.h declares it.
#include <cstring>

namespace {

struct Utilization {
  unsigned int gpu, memory;
};
struct Memory {
  unsigned long long total, free, used;
};

int g_devices[2];  // handles are pointers to these
bool g_initialized = false;

int Copy(const char* text, char* out, unsigned int size) {
  if (size == 0 || std::strlen(text) + 1 > size) return 7;  // NVML_ERROR_INSUFFICIENT_SIZE
  std::strcpy(out, text);
  return 0;
}

int Index(void* device) { return static_cast<int*>(device) == &g_devices[1] ? 1 : 0; }

}  // namespace

extern "C" {

int nvmlInit_v2() {
  g_initialized = true;
  return 0;
}
int nvmlShutdown() {
  g_initialized = false;
  return 0;
}
int nvmlDeviceGetCount_v2(unsigned int* count) {
  if (!g_initialized) return 1;  // NVML_ERROR_UNINITIALIZED
  *count = 2;
  return 0;
}
int nvmlDeviceGetHandleByIndex_v2(unsigned int index, void** device) {
  if (index > 1) return 2;  // NVML_ERROR_INVALID_ARGUMENT
  *device = &g_devices[index];
  return 0;
}
int nvmlDeviceGetName(void* device, char* name, unsigned int size) {
  return Copy(Index(device) == 0 ? "NVIDIA H200 (fake NVML)" : "NVIDIA L4 (fake NVML)", name, size);
}
int nvmlSystemGetDriverVersion(char* version, unsigned int size) { return Copy("550.54.15-fake", version, size); }
int nvmlDeviceGetUtilizationRates(void* device, Utilization* u) {
  *u = Index(device) == 0 ? Utilization{37, 12} : Utilization{0, 0};
  return 0;
}
int nvmlDeviceGetMemoryInfo(void* device, Memory* m) {
  const unsigned long long gib = 1ULL << 30;
  *m = Index(device) == 0 ? Memory{141 * gib, 101 * gib, 40 * gib} : Memory{24 * gib, 24 * gib, 0};
  return 0;
}
int nvmlDeviceGetTemperature(void* device, int, unsigned int* celsius) {
  *celsius = Index(device) == 0 ? 61 : 33;
  return 0;
}
int nvmlDeviceGetCurrentClocksThrottleReasons(void* device, unsigned long long* reasons) {
  *reasons = Index(device) == 0 ? 0x4ULL : 0x1ULL;  // sw_power_cap; gpu_idle
  return 0;
}
const char* nvmlErrorString(int rc) { return rc == 0 ? "Success" : "fake NVML error"; }

}  // extern "C"

// A fake libnvidia-ml for the telemetry tests (loaded through FT_NVML_LIBRARY): the C calls that
// gpu/nvml.cpp looks up, answering for two GPUs with fixed readings.
//   GPU 0, bus 00000000:41:00.0: 65 C, 180000 mW, SM 1980 MHz, 0 % busy, reasons GPU idle (not throttling)
//   GPU 1, bus 00000000:81:00.0: 83 C, 287500 mW, SM 1410 MHz, 97 % busy, reasons HW slowdown | HW thermal
// Built with FAKE_NVML_LEGACY it is an older driver's: only nvmlDeviceGetCurrentClocksThrottleReasons,
// no power or utilization reading (NOT_SUPPORTED), and GPU 0 held at its power cap.
// FAKE_NVML_INIT_ERROR=N makes nvmlInit_v2 fail with N; fake_nvml_inits() counts inits not shut down.
#include <cstdlib>
#include <cstring>
#include <strings.h>

namespace {

constexpr int kSuccess = 0, kUninitialized = 1, kInvalidArgument = 2, kNotSupported = 3, kNotFound = 6;

struct FakeGpu {
  const char* bus_id;
  unsigned temperature_c, power_mw, sm_clock_mhz, utilization_pct;
  unsigned long long reasons;
};

#ifdef FAKE_NVML_LEGACY
FakeGpu gpus[2] = {{"00000000:41:00.0", 65, 180000, 1980, 0, 0x4}, {"00000000:81:00.0", 83, 287500, 1410, 97, 0x48}};
#else
FakeGpu gpus[2] = {{"00000000:41:00.0", 65, 180000, 1980, 0, 0x1}, {"00000000:81:00.0", 83, 287500, 1410, 97, 0x48}};
#endif
int inits = 0;

FakeGpu* gpu(void* device) {
  for (auto& g : gpus)
    if (device == &g) return &g;
  return nullptr;
}

int answer(void* device, unsigned* out, unsigned FakeGpu::*field) {
  if (inits == 0) return kUninitialized;
  FakeGpu* g = gpu(device);
  if (!g || !out) return kInvalidArgument;
  *out = g->*field;
  return kSuccess;
}

}  // namespace

extern "C" {

int fake_nvml_inits() { return inits; }

int nvmlInit_v2() {
  if (const char* e = std::getenv("FAKE_NVML_INIT_ERROR")) return std::atoi(e);
  ++inits;
  return kSuccess;
}

int nvmlShutdown() {
  if (inits == 0) return kUninitialized;
  --inits;
  return kSuccess;
}

int nvmlSystemGetDriverVersion(char* version, unsigned length) {
  if (inits == 0) return kUninitialized;
  std::strncpy(version, "999.1.2", length);
  return kSuccess;
}

int nvmlDeviceGetCount_v2(unsigned* count) {
  if (inits == 0) return kUninitialized;
  *count = 2;
  return kSuccess;
}

int nvmlDeviceGetHandleByIndex_v2(unsigned index, void** device) {
  if (inits == 0) return kUninitialized;
  if (index >= 2) return kInvalidArgument;
  *device = &gpus[index];
  return kSuccess;
}

int nvmlDeviceGetHandleByPciBusId_v2(const char* bus_id, void** device) {
  if (inits == 0) return kUninitialized;
  for (auto& g : gpus)
    if (::strcasecmp(bus_id, g.bus_id) == 0) {
      *device = &g;
      return kSuccess;
    }
  return kNotFound;
}

int nvmlDeviceGetTemperature(void* device, int sensor, unsigned* celsius) {
  if (sensor != 0) return kInvalidArgument;  // NVML_TEMPERATURE_GPU is the only sensor
  return answer(device, celsius, &FakeGpu::temperature_c);
}

int nvmlDeviceGetPowerUsage(void* device, unsigned* milliwatts) {
#ifdef FAKE_NVML_LEGACY
  return inits == 0 ? kUninitialized : kNotSupported;
#else
  return answer(device, milliwatts, &FakeGpu::power_mw);
#endif
}

int nvmlDeviceGetClockInfo(void* device, int type, unsigned* mhz) {
  if (type != 1) return kNotSupported;  // only NVML_CLOCK_SM, so another type shows as missing
  return answer(device, mhz, &FakeGpu::sm_clock_mhz);
}

struct FakeUtilization {
  unsigned gpu, memory;
};
int nvmlDeviceGetUtilizationRates(void* device, FakeUtilization* utilization) {
#ifdef FAKE_NVML_LEGACY
  return inits == 0 ? kUninitialized : kNotSupported;
#else
  if (!utilization) return kInvalidArgument;
  utilization->memory = 0;
  return answer(device, &utilization->gpu, &FakeGpu::utilization_pct);
#endif
}

#ifdef FAKE_NVML_LEGACY
int nvmlDeviceGetCurrentClocksThrottleReasons(void* device, unsigned long long* reasons) {
#else
int nvmlDeviceGetCurrentClocksEventReasons(void* device, unsigned long long* reasons) {
#endif
  if (inits == 0) return kUninitialized;
  FakeGpu* g = gpu(device);
  if (!g) return kInvalidArgument;
  *reasons = g->reasons;
  return kSuccess;
}

}  // extern "C"

// Each rank's GPU temperature, power draw, SM clock and clock throttle reasons, read through NVML
// (gpu/nvml.h: loaded at run time, FT_NVML_LIBRARY overrides the library) for metrics.jsonl, and
// a one-time warning when the GPU slows its clocks for heat or at its power limit. Without NVML (no
// NVIDIA driver, CPU runs) open() gives nullptr and callers log no GPU fields.
#pragma once

#include <cstdint>
#include <limits>
#include <memory>
#include <optional>
#include <string>

#include "util/json.h"

namespace ft::gpu {

class Nvml;

struct GpuSample {
  static constexpr double kUnknown = std::numeric_limits<double>::quiet_NaN();
  // NaN when this GPU does not report the value (NVML_ERROR_NOT_SUPPORTED, e.g. MIG instances).
  double temperature_c = kUnknown;
  double power_w = kUnknown;
  double sm_clock_mhz = kUnknown;
  double utilization_pct = kUnknown;  // share of the last NVML sample period with a kernel running
  std::uint64_t throttle_reasons = 0;  // Nvml::k* bits, 0 when unknown

  // SW or HW thermal slowdown; also HW slowdown without a power-brake bit beside it (NVML sets
  // the unspecific HW slowdown bit for heat and for the power brake alike).
  bool thermal_throttle() const;
  // SW power cap (the board's power limit) or HW power brake (the power supply asks).
  bool power_throttle() const;
};

class GpuTelemetry {
 public:
  // The GPU that CUDA numbers `cuda_device`, named to NVML by its PCI bus id (cudaDeviceGetPCIBusId)
  // when this build has CUDA and CUDA can answer, else by NVML's index (PCI bus order). nullptr
  // when NVML is missing or does not know the device.
  static std::unique_ptr<GpuTelemetry> open(int cuda_device);
  static std::unique_ptr<GpuTelemetry> open_pci_bus_id(const std::string& bus_id);
  ~GpuTelemetry();

  // Empty when NVML answers none of the queries now (GPU lost); a field it does not answer is NaN.
  std::optional<GpuSample> sample() const;

 private:
  GpuTelemetry(std::unique_ptr<Nvml> nvml, void* device);
  std::unique_ptr<Nvml> nvml_;
  void* device_;  // Nvml::Device
};

// {"temperature_c": 83, "power_w": 287.5, "sm_clock_mhz": 1410, "throttle": ["thermal", "power"]}:
// unknown values are left out; "throttle" is always there (empty when the clocks run free).
Json sample_json(const GpuSample& sample);

// Warns once per kind: the first sample that throttles for heat gives a line with the fix, the first
// at the power limit another; later samples of an already reported kind give nothing (metrics.jsonl
// keeps the record). One object per rank process.
class ThrottleWarner {
 public:
  std::optional<std::string> check(const GpuSample& sample, int rank);

 private:
  bool thermal_warned_ = false;
  bool power_warned_ = false;
};

}  // namespace ft::gpu

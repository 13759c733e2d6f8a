// NVML, the NVIDIA driver's management library, loaded at run time with dlopen("libnvidia-ml.so.1"):
// no header or link dependency, and simply absent on a machine without the NVIDIA driver (ok() is
// false and callers skip what needs it). Only the calls ft_doctor and the GPU telemetry make.
//
// FT_NVML_LIBRARY=/path/to/libnvidia-ml.so.1 loads that file instead of asking the dynamic loader
// (a driver installed outside its search path; the tests load a fake NVML this way). When it is
// set and cannot be loaded, NVML counts as missing: there is no fallback to the default name.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

namespace ft::gpu {

class Nvml {
 public:
  using Device = void*;  // nvmlDevice_t; valid while this object lives

  // Clock event ("throttle") reason bits of nvmlDeviceGetCurrentClocksEventReasons, as in nvml.h
  // (nvmlClocksEventReason* = the older nvmlClocksThrottleReason*).
  static constexpr std::uint64_t kGpuIdle = 0x1;
  static constexpr std::uint64_t kSwPowerCap = 0x4;
  static constexpr std::uint64_t kHwSlowdown = 0x8;  // heat, power brake, or fast-trigger power protection
  static constexpr std::uint64_t kSyncBoost = 0x10;
  static constexpr std::uint64_t kSwThermalSlowdown = 0x20;
  static constexpr std::uint64_t kHwThermalSlowdown = 0x40;
  static constexpr std::uint64_t kHwPowerBrakeSlowdown = 0x80;

  Nvml();   // loads the library and calls nvmlInit_v2; never throws
  ~Nvml();  // nvmlShutdown (NVML counts inits, so several objects may live at once) and dlclose
  Nvml(const Nvml&) = delete;
  Nvml& operator=(const Nvml&) = delete;

  bool ok() const { return lib_ != nullptr; }
  const std::string& error() const { return error_; }  // why not ok(), for a log line

  // Each query is empty (nullptr, "") when this NVML lacks the call or the call fails (not
  // supported on this GPU, GPU lost).
  std::string driver_version() const;
  std::optional<unsigned> device_count() const;
  Device device_by_index(unsigned index) const;  // NVML's order: PCI bus order, not CUDA's
  Device device_by_pci_bus_id(const std::string& bus_id) const;  // "00000000:41:00.0" (cudaDeviceGetPCIBusId)
  std::optional<unsigned> pcie_link_generation(Device device) const;
  std::optional<unsigned> pcie_link_width(Device device) const;
  std::optional<unsigned> pcie_max_link_generation(Device device) const;
  std::optional<unsigned> pcie_max_link_width(Device device) const;
  std::optional<unsigned> temperature_c(Device device) const;  // GPU die, degrees Celsius
  std::optional<unsigned> power_mw(Device device) const;       // board power draw, milliwatts
  std::optional<unsigned> sm_clock_mhz(Device device) const;   // current SM clock
  // Percent of the last sample period (1/6 s to 1 s, by GPU) in which a kernel was running.
  std::optional<unsigned> gpu_utilization_pct(Device device) const;
  std::optional<std::uint64_t> clock_event_reasons(Device device) const;  // the k* bits above

 private:
  using Status = int;  // nvmlReturn_t, 0 = NVML_SUCCESS
  using UIntQuery = Status (*)(Device, unsigned*);
  std::optional<unsigned> uint_query(UIntQuery fn, Device device) const;

  void* lib_ = nullptr;
  std::string error_;
  Status (*shutdown_)() = nullptr;
  Status (*driver_version_)(char*, unsigned) = nullptr;
  Status (*device_count_)(unsigned*) = nullptr;
  Status (*by_index_)(unsigned, Device*) = nullptr;
  Status (*by_bus_id_)(const char*, Device*) = nullptr;
  UIntQuery pcie_gen_ = nullptr, pcie_width_ = nullptr, pcie_max_gen_ = nullptr, pcie_max_width_ = nullptr;
  Status (*temperature_)(Device, int, unsigned*) = nullptr;  // (device, nvmlTemperatureSensors_t, Celsius)
  UIntQuery power_ = nullptr;
  Status (*clock_)(Device, int, unsigned*) = nullptr;  // (device, nvmlClockType_t, MHz)
  Status (*reasons_)(Device, unsigned long long*) = nullptr;
  struct Utilization {  // nvmlUtilization_t
    unsigned gpu, memory;
  };
  Status (*utilization_)(Device, Utilization*) = nullptr;
};

}  // namespace ft::gpu

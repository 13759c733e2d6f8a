#include "gpu/nvml.h"

#include <dlfcn.h>

#include <cstdlib>

#include "util/error.h"

namespace ft::gpu {
namespace {

constexpr int kTemperatureGpu = 0;  // NVML_TEMPERATURE_GPU
constexpr int kClockSm = 1;         // NVML_CLOCK_SM

template <typename Fn>
void bind(void* lib, Fn& fn, const char* name) {
  fn = reinterpret_cast<Fn>(::dlsym(lib, name));
}

}  // namespace

Nvml::Nvml() {
  const char* path = std::getenv("FT_NVML_LIBRARY");
  const bool explicit_path = path && *path;
  lib_ = ::dlopen(explicit_path ? path : "libnvidia-ml.so.1", RTLD_NOW | RTLD_LOCAL);
  if (!lib_) {
    const char* why = ::dlerror();
    error_ = explicit_path ? str("FT_NVML_LIBRARY=", path, " cannot be loaded: ", why ? why : "dlopen failed")
                           : std::string("libnvidia-ml.so.1 not found (no NVIDIA driver)");
    return;
  }
  Status (*init)() = nullptr;
  bind(lib_, init, "nvmlInit_v2");
  bind(lib_, shutdown_, "nvmlShutdown");
  bind(lib_, driver_version_, "nvmlSystemGetDriverVersion");
  bind(lib_, device_count_, "nvmlDeviceGetCount_v2");
  bind(lib_, by_index_, "nvmlDeviceGetHandleByIndex_v2");
  bind(lib_, by_bus_id_, "nvmlDeviceGetHandleByPciBusId_v2");
  bind(lib_, pcie_gen_, "nvmlDeviceGetCurrPcieLinkGeneration");
  bind(lib_, pcie_width_, "nvmlDeviceGetCurrPcieLinkWidth");
  bind(lib_, pcie_max_gen_, "nvmlDeviceGetMaxPcieLinkGeneration");
  bind(lib_, pcie_max_width_, "nvmlDeviceGetMaxPcieLinkWidth");
  bind(lib_, temperature_, "nvmlDeviceGetTemperature");
  bind(lib_, power_, "nvmlDeviceGetPowerUsage");
  bind(lib_, clock_, "nvmlDeviceGetClockInfo");
  bind(lib_, utilization_, "nvmlDeviceGetUtilizationRates");
  // Renamed "clock events" in newer NVML (the old name is deprecated); older drivers have only the old one.
  bind(lib_, reasons_, "nvmlDeviceGetCurrentClocksEventReasons");
  if (!reasons_) bind(lib_, reasons_, "nvmlDeviceGetCurrentClocksThrottleReasons");
  const Status status = init ? init() : -1;
  if (status != 0) {
    error_ = init ? str("nvmlInit_v2 failed (NVML error ", status, ")") : std::string("the library has no nvmlInit_v2");
    ::dlclose(lib_);
    lib_ = nullptr;
  }
}

Nvml::~Nvml() {
  if (!lib_) return;
  if (shutdown_) shutdown_();
  ::dlclose(lib_);
}

std::string Nvml::driver_version() const {
  char text[96] = {0};  // NVML_SYSTEM_DRIVER_VERSION_BUFFER_SIZE is 80
  if (!ok() || !driver_version_ || driver_version_(text, sizeof(text)) != 0) return "";
  text[sizeof(text) - 1] = '\0';
  return text;
}

std::optional<unsigned> Nvml::device_count() const {
  unsigned n = 0;
  if (!ok() || !device_count_ || device_count_(&n) != 0) return std::nullopt;
  return n;
}

Nvml::Device Nvml::device_by_index(unsigned index) const {
  Device device = nullptr;
  if (!ok() || !by_index_ || by_index_(index, &device) != 0) return nullptr;
  return device;
}

Nvml::Device Nvml::device_by_pci_bus_id(const std::string& bus_id) const {
  Device device = nullptr;
  if (!ok() || !by_bus_id_ || by_bus_id_(bus_id.c_str(), &device) != 0) return nullptr;
  return device;
}

std::optional<unsigned> Nvml::uint_query(UIntQuery fn, Device device) const {
  unsigned value = 0;
  if (!ok() || !fn || !device || fn(device, &value) != 0) return std::nullopt;
  return value;
}

std::optional<unsigned> Nvml::pcie_link_generation(Device device) const { return uint_query(pcie_gen_, device); }
std::optional<unsigned> Nvml::pcie_link_width(Device device) const { return uint_query(pcie_width_, device); }
std::optional<unsigned> Nvml::pcie_max_link_generation(Device device) const { return uint_query(pcie_max_gen_, device); }
std::optional<unsigned> Nvml::pcie_max_link_width(Device device) const { return uint_query(pcie_max_width_, device); }
std::optional<unsigned> Nvml::power_mw(Device device) const { return uint_query(power_, device); }

std::optional<unsigned> Nvml::temperature_c(Device device) const {
  unsigned value = 0;
  if (!ok() || !temperature_ || !device || temperature_(device, kTemperatureGpu, &value) != 0) return std::nullopt;
  return value;
}

std::optional<unsigned> Nvml::sm_clock_mhz(Device device) const {
  unsigned value = 0;
  if (!ok() || !clock_ || !device || clock_(device, kClockSm, &value) != 0) return std::nullopt;
  return value;
}

std::optional<unsigned> Nvml::gpu_utilization_pct(Device device) const {
  Utilization value{};
  if (!ok() || !utilization_ || !device || utilization_(device, &value) != 0) return std::nullopt;
  return value.gpu;
}

std::optional<std::uint64_t> Nvml::clock_event_reasons(Device device) const {
  unsigned long long value = 0;
  if (!ok() || !reasons_ || !device || reasons_(device, &value) != 0) return std::nullopt;
  return static_cast<std::uint64_t>(value);
}

}  // namespace ft::gpu

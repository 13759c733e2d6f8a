#include "gpu/gpu_telemetry.h"

#include <cmath>
#include <cstdio>

#ifdef FT_WITH_NCCL
#include <cuda_runtime.h>
#endif

#include "gpu/nvml.h"
#include "util/error.h"

namespace ft::gpu {
namespace {

// "83 C, 287.5 W, SM clock 1410 MHz": the values the sample has.
std::string describe(const GpuSample& s) {
  std::string out;
  auto add = [&](double value, const char* format) {
    if (std::isnan(value)) return;
    char buf[48];
    std::snprintf(buf, sizeof(buf), format, value);
    out += (out.empty() ? "" : ", ") + std::string(buf);
  };
  add(s.temperature_c, "%.0f C");
  add(s.power_w, "%.1f W");
  add(s.sm_clock_mhz, "SM clock %.0f MHz");
  add(s.utilization_pct, "%.0f %% busy");
  char reasons[40];
  std::snprintf(reasons, sizeof(reasons), "NVML reasons 0x%llx", static_cast<unsigned long long>(s.throttle_reasons));
  return out + (out.empty() ? "" : ", ") + reasons;
}

}  // namespace

bool GpuSample::thermal_throttle() const {
  const std::uint64_t r = throttle_reasons;
  return (r & (Nvml::kSwThermalSlowdown | Nvml::kHwThermalSlowdown)) != 0 ||
         ((r & Nvml::kHwSlowdown) != 0 && (r & Nvml::kHwPowerBrakeSlowdown) == 0);
}

bool GpuSample::power_throttle() const {
  return (throttle_reasons & (Nvml::kSwPowerCap | Nvml::kHwPowerBrakeSlowdown)) != 0;
}

GpuTelemetry::GpuTelemetry(std::unique_ptr<Nvml> nvml, void* device) : nvml_(std::move(nvml)), device_(device) {}
GpuTelemetry::~GpuTelemetry() = default;

std::unique_ptr<GpuTelemetry> GpuTelemetry::open(int cuda_device) {
  FT_CHECK(cuda_device >= 0, "GPU telemetry: CUDA device ", cuda_device, " is not a device ordinal");
  auto nvml = std::make_unique<Nvml>();
  if (!nvml->ok()) return nullptr;
  Nvml::Device device = nullptr;
#ifdef FT_WITH_NCCL
  // CUDA's numbering follows CUDA_VISIBLE_DEVICES and CUDA_DEVICE_ORDER, NVML's does not: the bus id
  // names the same GPU to both.
  char bus_id[32] = {0};
  if (cudaDeviceGetPCIBusId(bus_id, sizeof(bus_id), cuda_device) == cudaSuccess) {
    device = nvml->device_by_pci_bus_id(bus_id);
    return device ? std::unique_ptr<GpuTelemetry>(new GpuTelemetry(std::move(nvml), device)) : nullptr;
  }
  cudaGetLastError();  // clear it: the caller's next CUDA error check is not about this
#endif
  device = nvml->device_by_index(static_cast<unsigned>(cuda_device));
  return device ? std::unique_ptr<GpuTelemetry>(new GpuTelemetry(std::move(nvml), device)) : nullptr;
}

std::unique_ptr<GpuTelemetry> GpuTelemetry::open_pci_bus_id(const std::string& bus_id) {
  auto nvml = std::make_unique<Nvml>();
  const Nvml::Device device = nvml->ok() ? nvml->device_by_pci_bus_id(bus_id) : nullptr;
  return device ? std::unique_ptr<GpuTelemetry>(new GpuTelemetry(std::move(nvml), device)) : nullptr;
}

std::optional<GpuSample> GpuTelemetry::sample() const {
  GpuSample s;
  bool any = false;
  if (const auto t = nvml_->temperature_c(device_)) s.temperature_c = *t, any = true;
  if (const auto p = nvml_->power_mw(device_)) s.power_w = *p / 1000.0, any = true;
  if (const auto c = nvml_->sm_clock_mhz(device_)) s.sm_clock_mhz = *c, any = true;
  if (const auto u = nvml_->gpu_utilization_pct(device_)) s.utilization_pct = *u, any = true;
  if (const auto r = nvml_->clock_event_reasons(device_)) s.throttle_reasons = *r, any = true;
  if (!any) return std::nullopt;
  return s;
}

Json sample_json(const GpuSample& s) {
  Json j = Json::object();
  if (!std::isnan(s.temperature_c)) j["temperature_c"] = s.temperature_c;
  if (!std::isnan(s.power_w)) j["power_w"] = s.power_w;
  if (!std::isnan(s.sm_clock_mhz)) j["sm_clock_mhz"] = s.sm_clock_mhz;
  if (!std::isnan(s.utilization_pct)) j["utilization_pct"] = s.utilization_pct;
  Json throttle = Json::array();
  if (s.thermal_throttle()) throttle.push_back("thermal");
  if (s.power_throttle()) throttle.push_back("power");
  j["throttle"] = throttle;
  return j;
}

std::optional<std::string> ThrottleWarner::check(const GpuSample& s, int rank) {
  const bool thermal = s.thermal_throttle() && !thermal_warned_;
  const bool power = s.power_throttle() && !power_warned_;
  if (!thermal && !power) return std::nullopt;
  thermal_warned_ = thermal_warned_ || thermal;
  power_warned_ = power_warned_ || power;
  const char* cause = thermal && power ? "for heat and at its power limit" : thermal ? "for heat" : "at its power limit";
  std::string fix;
  if (thermal)
    fix = "improve its cooling (fans, case airflow, room temperature; nvidia-smi -q -d TEMPERATURE shows the "
          "slowdown temperature)";
  if (power)
    fix += str(fix.empty() ? "" : "; ", "check its power limit with nvidia-smi -q -d PERFORMANCE,POWER and raise it "
               "(nvidia-smi -pl WATTS) if the power supply and cooling allow");
  return str("rank ", rank, ": the GPU slows its clocks ", cause, " (", describe(s), "), so steps take longer: ", fix,
             "; not repeated");
}

}  // namespace ft::gpu

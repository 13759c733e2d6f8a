// GPU telemetry on this GPU-less machine: the NVML loader, device lookup, unit conversion,
// throttle classification, the metrics.jsonl record and the warn-once rule, against a fake NVML
// (tests/gpu/fake_nvml.cpp) loaded through FT_NVML_LIBRARY.
#include <gtest/gtest.h>

#include <dlfcn.h>

#include <cmath>
#include <cstdlib>
#include <string>

#include <torch/cuda.h>

#include "gpu/gpu_telemetry.h"
#include "gpu/nvml.h"
#include "test_support.h"

namespace ft::gpu {
namespace {

// Sets an environment variable for one scope (nullptr unsets it), then restores it.
class ScopedEnv {
 public:
  ScopedEnv(const char* name, const char* value) : name_(name) {
    const char* old = std::getenv(name);
    had_ = old != nullptr;
    if (had_) old_ = old;
    if (value)
      ::setenv(name, value, 1);
    else
      ::unsetenv(name);
  }
  ~ScopedEnv() {
    if (had_)
      ::setenv(name_, old_.c_str(), 1);
    else
      ::unsetenv(name_);
  }

 private:
  const char* name_;
  bool had_ = false;
  std::string old_;
};

// Keeps the fake loaded across the objects under test, to read its count of open NVML inits.
class FakeNvml {
 public:
  explicit FakeNvml(const char* path) : env_("FT_NVML_LIBRARY", path), lib_(::dlopen(path, RTLD_NOW | RTLD_LOCAL)) {
    EXPECT_NE(lib_, nullptr) << ::dlerror();
  }
  ~FakeNvml() {
    if (lib_) ::dlclose(lib_);
  }
  int inits() const {
    auto fn = reinterpret_cast<int (*)()>(::dlsym(lib_, "fake_nvml_inits"));
    return fn ? fn() : -1;
  }

 private:
  ScopedEnv env_;
  void* lib_;
};

constexpr const char* kGpu0 = "00000000:41:00.0";
constexpr const char* kGpu1 = "00000000:81:00.0";

GpuSample with_reasons(std::uint64_t reasons) {
  GpuSample s;
  s.temperature_c = 83;
  s.power_w = 287.5;
  s.sm_clock_mhz = 1410;
  s.throttle_reasons = reasons;
  return s;
}

TEST(Nvml, LoadsTheLibraryNamedByFtNvmlLibrary) {
  FakeNvml fake(FT_FAKE_NVML);
  {
    Nvml nvml;
    ASSERT_TRUE(nvml.ok()) << nvml.error();
    EXPECT_EQ(fake.inits(), 1);
    EXPECT_EQ(nvml.driver_version(), "999.1.2");
    EXPECT_EQ(nvml.device_count(), 2u);
    const Nvml::Device gpu1 = nvml.device_by_index(1);
    ASSERT_NE(gpu1, nullptr);
    EXPECT_EQ(nvml.device_by_pci_bus_id(kGpu1), gpu1);
    EXPECT_NE(nvml.device_by_pci_bus_id(kGpu0), gpu1);
    EXPECT_EQ(nvml.device_by_index(2), nullptr);
    EXPECT_EQ(nvml.device_by_pci_bus_id("00000000:99:00.0"), nullptr);
    EXPECT_EQ(nvml.temperature_c(gpu1), 83u);
    EXPECT_EQ(nvml.power_mw(gpu1), 287500u);
    EXPECT_EQ(nvml.sm_clock_mhz(gpu1), 1410u);
    EXPECT_EQ(nvml.clock_event_reasons(gpu1), Nvml::kHwSlowdown | Nvml::kHwThermalSlowdown);
    EXPECT_FALSE(nvml.pcie_link_width(gpu1).has_value());  // the fake has no PCIe calls
  }
  EXPECT_EQ(fake.inits(), 0) << "nvmlShutdown was not called";
}

TEST(Nvml, MissingLibraryIsNoNvmlAndNoCrash) {
  ScopedEnv env("FT_NVML_LIBRARY", "/nonexistent/libnvidia-ml.so.1");
  Nvml nvml;
  EXPECT_FALSE(nvml.ok());
  EXPECT_NE(nvml.error().find("FT_NVML_LIBRARY=/nonexistent/libnvidia-ml.so.1"), std::string::npos) << nvml.error();
  EXPECT_EQ(nvml.driver_version(), "");
  EXPECT_EQ(nvml.device_by_index(0), nullptr);
  EXPECT_FALSE(nvml.temperature_c(nullptr).has_value());
  EXPECT_EQ(GpuTelemetry::open(0), nullptr);
  EXPECT_EQ(GpuTelemetry::open_pci_bus_id(kGpu1), nullptr);
}

TEST(Nvml, FailedInitIsNoNvml) {
  FakeNvml fake(FT_FAKE_NVML);
  ScopedEnv fail("FAKE_NVML_INIT_ERROR", "9");  // NVML_ERROR_DRIVER_NOT_LOADED
  Nvml nvml;
  EXPECT_FALSE(nvml.ok());
  EXPECT_NE(nvml.error().find("nvmlInit_v2 failed (NVML error 9)"), std::string::npos) << nvml.error();
  EXPECT_EQ(GpuTelemetry::open_pci_bus_id(kGpu1), nullptr);
}

TEST(GpuTelemetry, SamplesInWattsAndClassifiesTheThrottle) {
  FakeNvml fake(FT_FAKE_NVML);
  {
    const auto telemetry = GpuTelemetry::open_pci_bus_id(kGpu1);
    ASSERT_NE(telemetry, nullptr);
    const auto s = telemetry->sample();
    ASSERT_TRUE(s.has_value());
    EXPECT_EQ(s->temperature_c, 83);
    EXPECT_EQ(s->power_w, 287.5);  // 287500 mW
    EXPECT_EQ(s->sm_clock_mhz, 1410);
    EXPECT_EQ(s->utilization_pct, 97);
    EXPECT_EQ(s->throttle_reasons, 0x48u);
    EXPECT_TRUE(s->thermal_throttle());
    EXPECT_FALSE(s->power_throttle());
    EXPECT_EQ(sample_json(*s), parse_json(R"({"temperature_c": 83, "power_w": 287.5, "sm_clock_mhz": 1410,
                                              "utilization_pct": 97, "throttle": ["thermal"]})", "expected"));

    const auto idle = GpuTelemetry::open_pci_bus_id(kGpu0)->sample();
    ASSERT_TRUE(idle.has_value());
    EXPECT_EQ(idle->power_w, 180.0);
    EXPECT_EQ(sample_json(*idle)["throttle"], Json::array());  // GPU idle is no throttling
    EXPECT_EQ(fake.inits(), 1);
  }
  EXPECT_EQ(fake.inits(), 0);
  EXPECT_EQ(GpuTelemetry::open_pci_bus_id("00000000:99:00.0"), nullptr);
}

TEST(GpuTelemetry, OpensTheCudaDeviceOrdinal) {
  FakeNvml fake(FT_FAKE_NVML);
  EXPECT_FT_ERROR(GpuTelemetry::open(-1), "not a device ordinal");
  // With a GPU, CUDA names it by its real bus id, which the fake does not know.
  if (torch::cuda::device_count() > 0) GTEST_SKIP() << "CUDA sees a GPU: the fake's bus ids are not its";
  // Without CUDA's answer the ordinal is NVML's index.
  const auto telemetry = GpuTelemetry::open(1);
  ASSERT_NE(telemetry, nullptr);
  EXPECT_EQ(telemetry->sample()->temperature_c, 83);
  EXPECT_EQ(GpuTelemetry::open(0)->sample()->temperature_c, 65);
  EXPECT_EQ(GpuTelemetry::open(2), nullptr);
}

TEST(GpuTelemetry, OlderDriverThrottleCallAndMissingPower) {
  FakeNvml fake(FT_FAKE_NVML_LEGACY);
  const auto telemetry = GpuTelemetry::open_pci_bus_id(kGpu0);
  ASSERT_NE(telemetry, nullptr);
  const auto s = telemetry->sample();
  ASSERT_TRUE(s.has_value());
  EXPECT_TRUE(std::isnan(s->power_w));  // NOT_SUPPORTED
  EXPECT_EQ(s->throttle_reasons, Nvml::kSwPowerCap);  // through nvmlDeviceGetCurrentClocksThrottleReasons
  EXPECT_EQ(sample_json(*s), parse_json(R"({"temperature_c": 65, "sm_clock_mhz": 1980, "throttle": ["power"]})",
                                        "expected"));
}

TEST(GpuSample, ThrottleKinds) {
  struct Case {
    std::uint64_t reasons;
    bool thermal, power;
  };
  for (const Case& c : {Case{0x0, false, false}, Case{Nvml::kGpuIdle, false, false}, Case{0x2, false, false},
                        Case{Nvml::kSyncBoost, false, false}, Case{0x100, false, false},
                        Case{Nvml::kSwThermalSlowdown, true, false}, Case{Nvml::kHwThermalSlowdown, true, false},
                        Case{Nvml::kHwSlowdown, true, false},  // unspecific HW slowdown: heat
                        Case{Nvml::kHwSlowdown | Nvml::kHwPowerBrakeSlowdown, false, true},
                        Case{Nvml::kSwPowerCap, false, true},
                        Case{Nvml::kSwPowerCap | Nvml::kSwThermalSlowdown, true, true}}) {
    const GpuSample s = with_reasons(c.reasons);
    EXPECT_EQ(s.thermal_throttle(), c.thermal) << std::hex << c.reasons;
    EXPECT_EQ(s.power_throttle(), c.power) << std::hex << c.reasons;
  }
}

TEST(GpuSample, JsonLeavesOutWhatIsUnknown) {
  GpuSample s;
  EXPECT_EQ(sample_json(s).dump(), R"({"throttle":[]})");
  s.throttle_reasons = Nvml::kSwPowerCap | Nvml::kHwThermalSlowdown;
  EXPECT_EQ(sample_json(s)["throttle"], Json::array({"thermal", "power"}));
}

TEST(ThrottleWarner, WarnsOncePerKindWithTheFix) {
  ThrottleWarner warner;
  EXPECT_FALSE(warner.check(with_reasons(Nvml::kGpuIdle), 3).has_value());
  const auto heat = warner.check(with_reasons(Nvml::kHwThermalSlowdown), 3);
  ASSERT_TRUE(heat.has_value());
  EXPECT_EQ(heat->find('\n'), std::string::npos);
  for (const char* part : {"rank 3:", "for heat", "83 C, 287.5 W, SM clock 1410 MHz", "0x40", "cooling", "airflow"})
    EXPECT_NE(heat->find(part), std::string::npos) << part << " missing from: " << *heat;
  EXPECT_EQ(heat->find("power limit"), std::string::npos) << *heat;
  EXPECT_FALSE(warner.check(with_reasons(Nvml::kSwThermalSlowdown), 3).has_value());

  const auto power = warner.check(with_reasons(Nvml::kSwPowerCap | Nvml::kHwThermalSlowdown), 3);
  ASSERT_TRUE(power.has_value());
  EXPECT_NE(power->find("at its power limit"), std::string::npos) << *power;
  EXPECT_NE(power->find("nvidia-smi -q -d PERFORMANCE"), std::string::npos) << *power;
  EXPECT_EQ(power->find("cooling ("), std::string::npos) << "heat was already reported: " << *power;
  EXPECT_FALSE(warner.check(with_reasons(Nvml::kSwPowerCap), 3).has_value());
  EXPECT_FALSE(warner.check(with_reasons(Nvml::kHwPowerBrakeSlowdown | Nvml::kHwSlowdown), 3).has_value());
}

TEST(ThrottleWarner, BothKindsAtOnceGiveOneLine) {
  ThrottleWarner warner;
  GpuSample s = with_reasons(Nvml::kSwPowerCap | Nvml::kSwThermalSlowdown);
  s.power_w = GpuSample::kUnknown;
  const auto line = warner.check(s, 0);
  ASSERT_TRUE(line.has_value());
  EXPECT_NE(line->find("for heat and at its power limit"), std::string::npos) << *line;
  EXPECT_NE(line->find("83 C, SM clock 1410 MHz"), std::string::npos) << *line;  // no power reading
  EXPECT_NE(line->find("cooling"), std::string::npos) << *line;
  EXPECT_NE(line->find("nvidia-smi -q -d PERFORMANCE"), std::string::npos) << *line;
  EXPECT_FALSE(warner.check(s, 0).has_value());
}

TEST(ThrottleWarner, WarnsOnARealSampleFromTheFake) {
  FakeNvml fake(FT_FAKE_NVML);
  ThrottleWarner warner;
  const auto telemetry = GpuTelemetry::open_pci_bus_id(kGpu1);
  ASSERT_NE(telemetry, nullptr);
  const auto first = warner.check(*telemetry->sample(), 1);
  ASSERT_TRUE(first.has_value());
  EXPECT_NE(first->find("rank 1: the GPU slows its clocks for heat (83 C, 287.5 W"), std::string::npos) << *first;
  EXPECT_FALSE(warner.check(*telemetry->sample(), 1).has_value());
}

}  // namespace
}  // namespace ft::gpu

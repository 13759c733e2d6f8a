// ft_doctor's rules on plain facts (a GPU box described by hand), and the program as a user runs
// it on this machine, which has no GPU: it reports, exits 0 when nothing expected is missing, and
// exits 1 naming the problem and its fix when GPUs are expected or the rendezvous port is taken.
#include <gtest/gtest.h>

#include <unistd.h>

#include <torch/version.h>

#include "gpu/doctor.h"
#include "util/blas_kernels.h"
#include "test_support.h"

namespace ft::gpu {
namespace {

using Level = DoctorFinding::Level;

// A healthy 2 x 4090 box.
DoctorFacts good_box() {
  DoctorFacts f;
  f.libtorch_version = "2.5.1";
  f.libtorch_cuda = true;
  f.libtorch_cuda_version = "12.4";
  f.nccl_built = true;
  f.nccl_version = "2.21.5";
  f.blas_library = "/usr/lib/x86_64-linux-gnu/openblas-pthread/libblas.so.3";
  f.gpus = {{"NVIDIA GeForce RTX 4090", 25'757'220'864, 4, 16, 4, 16}, {"NVIDIA GeForce RTX 4090", 25'757'220'864, 4, 16, 4, 16}};
  f.peer = {{true, true}, {true, true}};
  f.nvml = true;
  f.driver_version = "550.54.14";
  f.shm_total_bytes = f.shm_free_bytes = 32LL << 30;
  f.port_free = true;
  f.free_port = 40000;
  f.allreduce_gb_per_s = 21.5;
  f.allreduce_note = "fp32 all-reduce of 256 MiB across 2 GPUs";
  return f;
}

std::vector<DoctorFinding> of(const std::vector<DoctorFinding>& all, Level level) {
  std::vector<DoctorFinding> out;
  for (const auto& f : all)
    if (f.level == level) out.push_back(f);
  return out;
}

DoctorOptions expecting(int gpus) {
  DoctorOptions o;
  o.expect_gpus = gpus;
  return o;
}

TEST(Doctor, AHealthyBoxHasNoWarnings) {
  const auto findings = doctor_findings(good_box(), expecting(2));
  EXPECT_TRUE(of(findings, Level::kFatal).empty());
  EXPECT_TRUE(of(findings, Level::kWarning).empty());
}

TEST(Doctor, FewerGpusThanExpectedIsFatalWithAFix) {
  const auto fatal = of(doctor_findings(good_box(), expecting(4)), Level::kFatal);
  ASSERT_EQ(fatal.size(), 1u);
  EXPECT_EQ(fatal[0].message, "expected 4 GPUs, found 2");
  EXPECT_FALSE(fatal[0].fix.empty());
}

TEST(Doctor, WhatBreaksOrSlowsARunIsNamed) {
  DoctorFacts f = good_box();
  f.peer = {{true, false}, {false, true}};                          // GeForce without P2P, no NCCL_P2P_DISABLE
  f.gpus[1].pcie_width = 4;                                          // a x4 slot
  f.blas_library = "/usr/lib/x86_64-linux-gnu/blas/libblas.so.3.11.0";  // the reference BLAS
  f.shm_free_bytes = 512LL << 20;                                    // docker's small default
  f.allreduce_gb_per_s = 2.0;
  const auto warnings = of(doctor_findings(f, expecting(2)), Level::kWarning);
  std::string topics;
  for (const auto& w : warnings) topics += w.topic + " ";
  EXPECT_EQ(topics, "blas pcie p2p allreduce shm ");
  for (const auto& w : warnings) EXPECT_FALSE(w.fix.empty()) << w.topic;
  EXPECT_NE(warnings[2].fix.find("NCCL_P2P_DISABLE=1"), std::string::npos);
  // With NCCL_P2P_DISABLE=1 set the missing P2P is only information.
  f.nccl_env = {"NCCL_P2P_DISABLE=1"};
  for (const auto& w : of(doctor_findings(f, expecting(2)), Level::kWarning)) EXPECT_NE(w.topic, "p2p");
}

TEST(Doctor, GpusWithoutCudaLibTorchOrNcclAndATakenPortAreFatal) {
  DoctorFacts f = good_box();
  f.libtorch_cuda = false;
  f.nccl_built = false;
  f.port_free = false;
  f.port_explicit = true;
  f.port = 29501;
  std::string topics;
  for (const auto& x : of(doctor_findings(f, expecting(2)), Level::kFatal)) topics += x.topic + " ";
  EXPECT_EQ(topics, "libtorch nccl port ");
  // The default port taken is a warning: ft_launch can be given another.
  f.port_explicit = false;
  const auto warnings = of(doctor_findings(f, expecting(2)), Level::kWarning);
  ASSERT_EQ(warnings.size(), 1u);
  EXPECT_EQ(warnings[0].fix, "choose another: ft_launch --master_port 40000 (free now)");
}

TEST(Doctor, ACudaLibTorchWithoutADeviceAndACpuLibTorchNameTheirFixes) {
  DoctorFacts f = good_box();
  f.libtorch_cuda = false;  // built with CUDA 12.4, no device usable
  auto fatal = of(doctor_findings(f, expecting(2)), Level::kFatal);
  ASSERT_FALSE(fatal.empty());
  EXPECT_EQ(fatal[0].message, "LibTorch 2.5.1 with CUDA 12.4, but no usable CUDA device: training runs on the CPU");
  EXPECT_EQ(fatal[0].fix, "check nvidia-smi, that the driver supports CUDA 12.4 and CUDA_VISIBLE_DEVICES");
  f.libtorch_cuda_version = "";  // a CPU LibTorch
  fatal = of(doctor_findings(f, expecting(2)), Level::kFatal);
  ASSERT_FALSE(fatal.empty());
  EXPECT_EQ(fatal[0].message, "LibTorch 2.5.1, a CPU build: training runs on the CPU");
  EXPECT_EQ(fatal[0].fix, "build against a CUDA LibTorch: scripts/setup.sh --libtorch pip && scripts/build.sh --libtorch pip");
  // Without GPUs expected, either is only information.
  EXPECT_TRUE(of(doctor_findings(f, expecting(0)), Level::kFatal).empty());
}

TEST(Doctor, MklInsideLibTorchCountsAsAFastBlas) {
  DoctorFacts f = good_box();
  f.blas_library = "";
  f.libtorch_mkl = true;  // a pip torch: MKL linked into libtorch_cpu.so, no separate BLAS library loaded
  for (const auto& x : doctor_findings(f, expecting(2))) {
    if (x.topic == "blas") {
      EXPECT_EQ(x.level, Level::kOk) << x.message;
    }
  }
  f.libtorch_mkl = false;
  bool warned = false;
  for (const auto& x : of(doctor_findings(f, expecting(2)), Level::kWarning)) warned |= x.topic == "blas";
  EXPECT_TRUE(warned);
}

TEST(Doctor, AFallbackOpenBlasKernelSetChosenByTheUserIsAWarning) {
  DoctorFacts f = good_box();
  f.openblas_core = "Prescott";
  f.better_openblas_core = "SkylakeX";
  bool warned = false;
  for (const auto& x : of(doctor_findings(f, expecting(2)), Level::kWarning))
    if (x.topic == "blas") {
      warned = true;
      EXPECT_NE(x.message.find("Prescott kernels"), std::string::npos) << x.message;
      EXPECT_EQ(x.fix, "export OPENBLAS_CORETYPE=SkylakeX (or unset it: ft programs then choose it)");
    }
  EXPECT_TRUE(warned);
  f.better_openblas_core = "";
  for (const auto& x : of(doctor_findings(f, expecting(2)), Level::kWarning)) EXPECT_NE(x.topic, "blas") << x.message;
}

TEST(Doctor, ReferenceBlasIsRecognized) {
  EXPECT_TRUE(is_reference_blas("/usr/lib/x86_64-linux-gnu/blas/libblas.so.3"));
  EXPECT_FALSE(is_reference_blas("/usr/lib/x86_64-linux-gnu/openblas-pthread/libblas.so.3"));
  EXPECT_FALSE(is_reference_blas("/opt/intel/lib/libmkl_rt.so.2"));
}

std::string doctor(const std::string& args) { return test::bin_path("ft_doctor") + " --no-probe " + args; }

TEST(FtDoctor, ReportsThisMachineAndExitsZeroWhenNothingIsExpected) {
  const auto r = test::run_command("NCCL_DEBUG=WARN " + doctor(""));
  EXPECT_EQ(r.exit_code, 0) << r.output;
  for (const std::string& text : {std::string("LibTorch ") + TORCH_VERSION, std::string("blas"), std::string("/dev/shm"),
                                  std::string("in effect: NCCL_DEBUG=WARN"), std::string("ready for a run")})
    EXPECT_NE(r.output.find(text), std::string::npos) << text << "\n" << r.output;
}

TEST(FtDoctor, ExpectedGpusThatAreNotThereAndATakenPortExitOne) {
  const auto gpus = test::run_command(doctor("--expect-gpus 2"));
  EXPECT_EQ(gpus.exit_code, 1) << gpus.output;
  EXPECT_NE(gpus.output.find("FATAL    gpus       expected 2 GPUs, found 0"), std::string::npos) << gpus.output;
  EXPECT_NE(gpus.output.find("problems would break a run"), std::string::npos) << gpus.output;

  int fd = -1;
  const int port = test::free_port(&fd);  // listening: in use
  const auto taken = test::run_command("MASTER_PORT=" + std::to_string(port) + " " + doctor(""));
  ::close(fd);
  EXPECT_EQ(taken.exit_code, 1) << taken.output;
  EXPECT_NE(taken.output.find("rendezvous port " + std::to_string(port) + " (MASTER_PORT) is in use"), std::string::npos)
      << taken.output;
  EXPECT_NE(taken.output.find("fix: choose another: ft_launch --master_port"), std::string::npos) << taken.output;
}

// The restart of util/blas_kernels.h, as a user meets it: started without OPENBLAS_CORETYPE, a
// program ends up on kernels this CPU has nothing better than (on a CPU OpenBLAS 0.3.21 does not
// know, such as this VM's Xeon: Prescott at first, SkylakeX after the restart).
TEST(FtDoctor, ProgramsRunOpenBlasKernelsThisCpuHasNothingBetterThan) {
  const auto r = test::run_command("env -u OPENBLAS_CORETYPE LOCAL_RANK=0 " + test::bin_path("ft_doctor") +
                                   " --blas-core 2>&1");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const std::string core = r.output.substr(r.output.rfind('\n', r.output.size() - 2) + 1);
  const std::string chosen = core.substr(0, core.find('\n'));
  EXPECT_EQ(better_openblas_core(chosen, cpu_vector_features()), "") << r.output;
  const auto said = r.output.find("starting again with OPENBLAS_CORETYPE=");
  if (said != std::string::npos) {
    EXPECT_NE(r.output.find("OPENBLAS_CORETYPE=" + chosen + " "), std::string::npos) << r.output;
    std::printf("restarted: %s", r.output.c_str());
  }
  // A kernel set the user chose is kept, even a slow one.
  const auto kept = test::run_command("OPENBLAS_CORETYPE=Prescott " + test::bin_path("ft_doctor") + " --blas-core");
  if (!chosen.empty()) EXPECT_EQ(kept.output, "Prescott\n");
  // Programs that multiply no matrices do not start over (on this VM ft_doctor above does).
  const auto plan = test::run_command("env -u OPENBLAS_CORETYPE LOCAL_RANK=0 " + test::bin_path("ft_plan") +
                                      " --model meta-llama/Llama-2-7b-hf 2>&1");
  ASSERT_EQ(plan.exit_code, 0) << plan.output;
  EXPECT_EQ(plan.output.find("starting again"), std::string::npos) << plan.output;
}

}  // namespace
}  // namespace ft::gpu

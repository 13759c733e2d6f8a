// ft_doctor: is this machine ready for a run? LibTorch and NCCL, the CPU BLAS, GPUs against those
// expected, peer access and PCIe links, an all-reduce probe, NCCL settings, /dev/shm and the
// rendezvous port; each finding with a one-line fix. Exits 1 when something would break a run.
//   ft_doctor
//   ft_doctor --expect-gpus 8
//   MASTER_PORT=29501 ft_doctor --expect-gpus 2 --no-probe
//   ft_doctor --blas-core       # "SkylakeX": the OpenBLAS kernels ft programs use on this CPU
#include <cxxopts.hpp>

#include <cstdio>
#include <iostream>

#include "app_main.h"
#include "gpu/doctor.h"
#include "util/blas_kernels.h"

namespace {

const char* level_name(ft::gpu::DoctorFinding::Level level) {
  switch (level) {
    case ft::gpu::DoctorFinding::Level::kOk: return "ok";
    case ft::gpu::DoctorFinding::Level::kInfo: return "info";
    case ft::gpu::DoctorFinding::Level::kWarning: return "warning";
    default: return "FATAL";
  }
}

int run(int argc, char** argv) {
  cxxopts::Options options("ft_doctor", "Check this machine for a run: GPUs, P2P, NCCL settings, /dev/shm, ports.");
  options.add_options()
      ("expect-gpus", "GPUs the run needs on this machine", cxxopts::value<int>())
      ("ranks", "local ranks the run will start (for /dev/shm; default: --expect-gpus, LOCAL_WORLD_SIZE or 1)",
       cxxopts::value<int>()->default_value("0"))
      ("port", "rendezvous port to check (default: MASTER_PORT, else 29500)", cxxopts::value<int>()->default_value("0"))
      ("no-probe", "skip the all-reduce bandwidth probe")
      ("blas-core", "print the OpenBLAS kernel set ft programs run with here, and nothing else (for scripts that "
                    "run PyTorch beside them: OPENBLAS_CORETYPE)")
      ("h,help", "show this help");
  auto args = options.parse(argc, argv);
  if (args.count("help")) {
    std::cout << options.help() << std::endl;
    return 0;
  }
  if (args.count("blas-core")) {
    std::cout << ft::openblas_core() << std::endl;  // after run_main's restart, if there was one
    return 0;
  }
  ft::gpu::DoctorOptions o;
  if (args.count("expect-gpus")) {
    o.expect_gpus = args["expect-gpus"].as<int>();
    if (o.expect_gpus < 0) throw ft::app::UsageError{"--expect-gpus must be 0 or more"};
  }
  o.ranks = args["ranks"].as<int>();
  o.port = args["port"].as<int>();
  if (o.port < 0 || o.port > 65535) throw ft::app::UsageError{"--port must be in 1..65535"};
  o.probe = args.count("no-probe") == 0;
  const auto findings = ft::gpu::doctor_findings(ft::gpu::gather_doctor_facts(o), o);
  int fatal = 0, warnings = 0;
  for (const auto& f : findings) {
    std::printf("%-8s %-10s %s\n", level_name(f.level), f.topic.c_str(), f.message.c_str());
    if (!f.fix.empty()) std::printf("%-8s %-10s fix: %s\n", "", "", f.fix.c_str());
    fatal += f.level == ft::gpu::DoctorFinding::Level::kFatal;
    warnings += f.level == ft::gpu::DoctorFinding::Level::kWarning;
  }
  if (fatal > 0) {
    std::printf("%d problem%s would break a run (and %d warning%s)\n", fatal, fatal == 1 ? "" : "s", warnings,
                warnings == 1 ? "" : "s");
    return 1;
  }
  std::printf("ready for a run (%d warning%s)\n", warnings, warnings == 1 ? "" : "s");
  return 0;
}

}  // namespace

int main(int argc, char** argv) { return ft::app::run_main("ft_doctor", argc, argv, run); }

// The checks behind ft_doctor: what this machine offers a run, each finding with a one-line fix.
// LibTorch's version and build (CUDA, NCCL), the BLAS library matrix products on the CPU really
// go through, the GPUs seen against those expected with their memory and peer-to-peer access,
// the driver and each GPU's PCIe link (through NVML, loaded at run time when the driver is there),
// an all-reduce bandwidth probe across the local GPUs (NCCL builds with 2+ GPUs), the NCCL_*
// variables in effect, /dev/shm (NCCL's intra-node transport) and the rendezvous port.
// The decision rules take plain facts (DoctorFacts), so they are tested on a machine without GPU.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace ft::gpu {

struct DoctorFinding {
  enum class Level { kOk, kInfo, kWarning, kFatal };
  Level level = Level::kOk;
  std::string topic;    // "libtorch", "blas", "gpus", "p2p", "pcie", "nccl", "shm", "port", ...
  std::string message;  // what was found
  std::string fix;      // one line, empty when nothing is to be done
};

struct DoctorOptions {
  int expect_gpus = -1;  // -1: no expectation
  int ranks = 0;         // local ranks the run will start (for /dev/shm); 0: expect_gpus, LOCAL_WORLD_SIZE or 1
  int port = 0;          // rendezvous port to check; 0: MASTER_PORT, else 29500 (torchrun's default)
  bool probe = true;     // run the all-reduce bandwidth probe when there are 2+ GPUs
};

struct GpuInfo {
  std::string name;
  std::int64_t memory_bytes = 0;
  int pcie_generation = 0, pcie_width = 0;          // current link (NVML), 0 = unknown
  int pcie_max_generation = 0, pcie_max_width = 0;  // what the GPU supports
};

// Everything the rules look at, gathered by gather_doctor_facts() or written by a test.
struct DoctorFacts {
  std::string libtorch_version;          // "1.13.0"
  bool libtorch_cuda = false;            // LibTorch built with CUDA and a device usable
  std::string libtorch_cuda_version;     // the CUDA LibTorch was built with ("13.2"), "" for a CPU build
  bool libtorch_mkl = false;             // MKL is linked into LibTorch (a pip torch): CPU matrix products use it
  bool nccl_built = false;               // this build has the NCCL communicator
  std::string nccl_version;              // "2.21.5" when built with NCCL
  std::string blas_library;              // resolved path of the BLAS library loaded, "" if none found
  std::string openblas_core;             // OpenBLAS's kernel set ("SkylakeX"), "" when not OpenBLAS
  std::string better_openblas_core;      // a faster kernel set this CPU could run, "" when none
  std::vector<GpuInfo> gpus;
  std::vector<std::vector<bool>> peer;   // peer[i][j]: GPU i can access GPU j
  bool nvml = false;                     // NVML was loaded (a driver is installed)
  std::string driver_version;
  std::vector<std::string> nccl_env;     // "NCCL_P2P_DISABLE=1", ...
  std::int64_t shm_total_bytes = -1;     // -1: /dev/shm missing
  std::int64_t shm_free_bytes = -1;
  int port = 29500;
  bool port_explicit = false;            // MASTER_PORT or --port gave it
  bool port_free = true;
  int free_port = 0;                     // a port the system handed out as free
  double allreduce_gb_per_s = 0;         // bus bandwidth of the probe, 0 = not run
  std::string allreduce_note;            // why it was not run, or its size
};

DoctorFacts gather_doctor_facts(const DoctorOptions& options);
std::vector<DoctorFinding> doctor_findings(const DoctorFacts& facts, const DoctorOptions& options);

// Whether `path` (of the loaded libblas) is the slow reference implementation.
bool is_reference_blas(const std::string& path);

}  // namespace ft::gpu

#include "gpu/doctor.h"

#include <link.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <ATen/Context.h>
#include <torch/cuda.h>
#include <torch/version.h>

#include <chrono>
#include <climits>
#include <cstdlib>
#include <cstring>

#ifdef FT_WITH_NCCL
#include <cuda_runtime.h>
#include <nccl.h>
#endif

#include "gpu/gpu_checks.h"
#include "gpu/nvml.h"
#include "launch/free_port.h"
#include "util/blas_kernels.h"
#include "util/build_info.h"
#include "util/error.h"

extern char** environ;

namespace ft::gpu {
namespace {

using Level = DoctorFinding::Level;

constexpr std::int64_t kShmPerRank = 1LL << 30;  // NCCL's shared-memory buffers per local rank, with room

std::string gib(std::int64_t bytes) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%.1f GiB", bytes / double(1LL << 30));
  return buf;
}

// The resolved path of the BLAS library this process loaded (libblas.so.3 is an alternatives link).
std::string loaded_blas() {
  std::string found;
  dl_iterate_phdr(
      [](struct dl_phdr_info* info, size_t, void* data) {
        const std::string name = info->dlpi_name ? info->dlpi_name : "";
        if (name.find("libblas") == std::string::npos && name.find("openblas") == std::string::npos &&
            name.find("mkl_rt") == std::string::npos)
          return 0;
        char resolved[PATH_MAX];
        *static_cast<std::string*>(data) = ::realpath(name.c_str(), resolved) ? resolved : name;
        return 1;
      },
      &found);
  return found;
}

#ifdef FT_WITH_NCCL
// Bus bandwidth of an fp32 all-reduce of `bytes` across `n` local GPUs, one process, NCCL.
double allreduce_probe(int n, std::size_t bytes, std::string* note) {
  std::vector<ncclComm_t> comms(n);
  std::vector<int> devices(n);
  for (int i = 0; i < n; ++i) devices[i] = i;
  if (ncclCommInitAll(comms.data(), n, devices.data()) != ncclSuccess) {
    *note = "ncclCommInitAll failed";
    return 0;
  }
  std::vector<float*> buffers(n, nullptr);
  std::vector<cudaStream_t> streams(n);
  bool ok = true;
  for (int i = 0; i < n && ok; ++i) {
    ok = cudaSetDevice(i) == cudaSuccess && cudaMalloc(&buffers[i], bytes) == cudaSuccess &&
         cudaMemset(buffers[i], 0, bytes) == cudaSuccess && cudaStreamCreate(&streams[i]) == cudaSuccess;
  }
  auto run = [&](int iterations) {
    for (int it = 0; it < iterations && ok; ++it) {
      ok = ncclGroupStart() == ncclSuccess;
      for (int i = 0; i < n && ok; ++i)
        ok = ncclAllReduce(buffers[i], buffers[i], bytes / sizeof(float), ncclFloat, ncclSum, comms[i], streams[i]) ==
             ncclSuccess;
      ok = ncclGroupEnd() == ncclSuccess && ok;
    }
    for (int i = 0; i < n && ok; ++i) ok = cudaSetDevice(i) == cudaSuccess && cudaStreamSynchronize(streams[i]) == cudaSuccess;
  };
  double gbps = 0;
  run(2);  // warm-up: connection setup
  const auto start = std::chrono::steady_clock::now();
  const int iterations = 10;
  run(iterations);
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  if (ok && seconds > 0) gbps = 2.0 * (n - 1) / n * bytes * iterations / seconds / 1e9;
  if (!ok) *note = "a CUDA or NCCL call failed during the probe";
  for (int i = 0; i < n; ++i) {
    cudaSetDevice(i);
    if (buffers[i]) cudaFree(buffers[i]);
    if (streams[i]) cudaStreamDestroy(streams[i]);
    ncclCommDestroy(comms[i]);
  }
  return gbps;
}
#endif

}  // namespace

bool is_reference_blas(const std::string& path) {
  // Debian's reference implementation lives in .../blas/libblas.so.3 (OpenBLAS in
  // .../openblas-pthread/, BLIS in .../blis-*/, MKL as libmkl_rt).
  return path.find("/blas/libblas") != std::string::npos || path.find("libblas.so.3.") != std::string::npos;
}

DoctorFacts gather_doctor_facts(const DoctorOptions& options) {
  DoctorFacts f;
  f.libtorch_version = TORCH_VERSION;
  f.libtorch_cuda = torch::cuda::is_available();
  f.libtorch_cuda_version = FT_TORCH_CUDA_VERSION;
  f.libtorch_mkl = at::hasMKL();
  f.blas_library = loaded_blas();
  f.openblas_core = openblas_core();
  f.better_openblas_core = better_openblas_core(f.openblas_core, cpu_vector_features());
  for (char** e = environ; e && *e; ++e)
    if (std::strncmp(*e, "NCCL_", 5) == 0) f.nccl_env.emplace_back(*e);
  struct statvfs shm {};
  if (::statvfs("/dev/shm", &shm) == 0) {
    f.shm_total_bytes = static_cast<std::int64_t>(shm.f_blocks) * static_cast<std::int64_t>(shm.f_frsize);
    f.shm_free_bytes = static_cast<std::int64_t>(shm.f_bavail) * static_cast<std::int64_t>(shm.f_frsize);
  }
  const char* master_port = std::getenv("MASTER_PORT");
  f.port_explicit = options.port > 0 || master_port != nullptr;
  f.port = options.port > 0 ? options.port : master_port ? std::atoi(master_port) : 29500;
  f.port_free = f.port > 0 && f.port < 65536 && launch::port_is_free(f.port);
  try {
    f.free_port = launch::free_port();
  } catch (const Error&) {
    f.free_port = 0;  // none to suggest
  }

#ifdef FT_WITH_NCCL
  f.nccl_built = true;
  int version = 0;
  if (ncclGetVersion(&version) == ncclSuccess)
    f.nccl_version = str(version / 10000, ".", version % 10000 / 100, ".", version % 100);
  const GpuFacts visible = read_gpu_facts();
  const int count = visible.visible_devices;
  f.peer = visible.peer;
  Nvml nvml;
  f.nvml = nvml.ok();
  f.driver_version = nvml.driver_version();
  for (int i = 0; i < count; ++i) {
    GpuInfo g;
    g.name = visible.names[i];
    g.memory_bytes = visible.memory_bytes[i];
    char bus_id[32] = {0};
    const Nvml::Device handle = nvml.ok() && cudaDeviceGetPCIBusId(bus_id, sizeof(bus_id), i) == cudaSuccess
                                    ? nvml.device_by_pci_bus_id(bus_id)
                                    : nullptr;
    if (handle) {
      g.pcie_generation = static_cast<int>(nvml.pcie_link_generation(handle).value_or(0));
      g.pcie_width = static_cast<int>(nvml.pcie_link_width(handle).value_or(0));
      g.pcie_max_generation = static_cast<int>(nvml.pcie_max_link_generation(handle).value_or(0));
      g.pcie_max_width = static_cast<int>(nvml.pcie_max_link_width(handle).value_or(0));
    }
    f.gpus.push_back(g);
  }
  if (count >= 2 && options.probe) {
    const std::size_t bytes = 256u << 20;
    f.allreduce_gb_per_s = allreduce_probe(count, bytes, &f.allreduce_note);
    if (f.allreduce_note.empty()) f.allreduce_note = str("fp32 all-reduce of 256 MiB across ", count, " GPUs");
  } else {
    f.allreduce_note = count >= 2 ? "skipped (--no-probe)" : "needs 2 or more GPUs";
  }
#else
  f.allreduce_note = "this build has no NCCL";
#endif
  return f;
}

std::vector<DoctorFinding> doctor_findings(const DoctorFacts& f, const DoctorOptions& options) {
  std::vector<DoctorFinding> out;
  auto add = [&](Level level, const std::string& topic, const std::string& message, const std::string& fix = "") {
    out.push_back({level, topic, message, fix});
  };
  const int gpus = static_cast<int>(f.gpus.size());
  const bool want_gpus = options.expect_gpus > 0;

  // LibTorch and NCCL.
  const std::string cuda_version = f.libtorch_cuda_version.empty() ? "" : " " + f.libtorch_cuda_version;
  if (f.libtorch_cuda) {
    add(Level::kOk, "libtorch", str("LibTorch ", f.libtorch_version, " with CUDA", cuda_version));
  } else if (!f.libtorch_cuda_version.empty()) {
    add(want_gpus ? Level::kFatal : Level::kInfo, "libtorch",
        str("LibTorch ", f.libtorch_version, " with CUDA", cuda_version,
            ", but no usable CUDA device: training runs on the CPU"),
        want_gpus ? str("check nvidia-smi, that the driver supports CUDA", cuda_version, " and CUDA_VISIBLE_DEVICES")
                  : "");
  } else {
    add(want_gpus ? Level::kFatal : Level::kInfo, "libtorch",
        str("LibTorch ", f.libtorch_version, ", a CPU build: training runs on the CPU"),
        want_gpus ? "build against a CUDA LibTorch: scripts/setup.sh --libtorch pip && scripts/build.sh --libtorch pip"
                  : "");
  }
  if (f.nccl_built) {
    add(Level::kOk, "nccl", str("NCCL communicator built, NCCL ", f.nccl_version.empty() ? "(version unknown)" : f.nccl_version));
  } else {
    add(options.expect_gpus > 1 ? Level::kFatal : Level::kInfo, "nccl", "this build has no NCCL communicator",
        options.expect_gpus > 1 ? "install the CUDA toolkit with NCCL and rebuild with -DFT_WITH_NCCL=ON" : "");
  }
  // BLAS.
  if (f.blas_library.empty() && f.libtorch_mkl) {
    add(Level::kOk, "blas", "CPU matrix products through MKL, linked into LibTorch");
  } else if (f.blas_library.empty()) {
    add(Level::kWarning, "blas", "no BLAS library is loaded: CPU matrix products may use LibTorch's slow fallback",
        "apt-get install libopenblas0-pthread");
  } else if (is_reference_blas(f.blas_library)) {
    add(Level::kWarning, "blas", str("CPU matrix products go through the reference BLAS (", f.blas_library,
                                     "): about 40x slower than OpenBLAS"),
        "apt-get install libopenblas0-pthread (or update-alternatives --config libblas.so.3-x86_64-linux-gnu)");
  } else if (!f.better_openblas_core.empty()) {
    // Only when the user chose the slow set: ft programs restart with the better one otherwise.
    add(Level::kWarning, "blas", str("OpenBLAS runs its ", f.openblas_core, " kernels, on a CPU that runs its ",
                                     f.better_openblas_core, " kernels several times faster"),
        str("export OPENBLAS_CORETYPE=", f.better_openblas_core, " (or unset it: ft programs then choose it)"));
  } else {
    add(Level::kOk, "blas", str("CPU matrix products through ", f.blas_library,
                                f.openblas_core.empty() ? "" : str(", OpenBLAS kernels ", f.openblas_core)));
  }
  // GPUs.
  if (want_gpus && gpus < options.expect_gpus) {
    add(Level::kFatal, "gpus", str("expected ", options.expect_gpus, " GPUs, found ", gpus),
        gpus == 0 ? "check the NVIDIA driver (nvidia-smi), CUDA_VISIBLE_DEVICES and that this is a CUDA build"
                  : "check CUDA_VISIBLE_DEVICES and nvidia-smi; start as many ranks as there are GPUs");
  } else if (gpus == 0) {
    add(Level::kInfo, "gpus", "no GPU: runs use the CPU and Gloo");
  } else {
    add(Level::kOk, "gpus", str(gpus, " GPU", gpus == 1 ? "" : "s", want_gpus && gpus > options.expect_gpus ?
                                str(" (", options.expect_gpus, " expected: the run will use the first ones)") : ""));
  }
  for (int i = 0; i < gpus; ++i) {
    const GpuInfo& g = f.gpus[i];
    add(Level::kInfo, "gpus", str("GPU ", i, ": ", g.name, ", ", gib(g.memory_bytes)));
    if (g.pcie_width > 0 && g.pcie_max_width > 0 && g.pcie_width < g.pcie_max_width)
      add(Level::kWarning, "pcie", str("GPU ", i, " runs its PCIe link at x", g.pcie_width, " of x", g.pcie_max_width,
                                       ": gradient traffic to it is slower"),
          "move it to a full-width slot (or check the BIOS lane split)");
    else if (g.pcie_generation > 0)
      add(Level::kInfo, "pcie", str("GPU ", i, ": PCIe gen ", g.pcie_generation, " x", g.pcie_width, " (supports gen ",
                                    g.pcie_max_generation, " x", g.pcie_max_width, "; idle GPUs lower the generation)"));
  }
  // Peer-to-peer access.
  bool p2p_disable = false;
  for (const auto& e : f.nccl_env) p2p_disable = p2p_disable || e.rfind("NCCL_P2P_DISABLE=1", 0) == 0;
  for (int i = 0; i < gpus; ++i)
    for (int j = i + 1; j < gpus; ++j) {
      if (f.peer[i][j] && f.peer[j][i]) continue;
      if (geforce40_pair(f.gpus[i].name, f.gpus[j].name) && !p2p_disable) {
        add(Level::kWarning, "p2p", str("GPUs ", i, " and ", j, " have no peer-to-peer access and NCCL_P2P_DISABLE is "
                                        "not set: with some GeForce drivers NCCL then hangs"),
            "export NCCL_P2P_DISABLE=1");
      } else {
        add(Level::kInfo, "p2p", str("GPUs ", i, " and ", j, " have no peer-to-peer access: NCCL copies through host "
                                     "memory"));
      }
    }
  if (gpus >= 2 && f.allreduce_gb_per_s > 0) {
    add(f.allreduce_gb_per_s < 5 ? Level::kWarning : Level::kOk, "allreduce",
        str(f.allreduce_note, ": ", f.allreduce_gb_per_s, " GB/s bus bandwidth"),
        f.allreduce_gb_per_s < 5 ? "check the PCIe links above and NCCL_P2P_DISABLE / NCCL_SHM_DISABLE" : "");
  } else {
    add(Level::kInfo, "allreduce", str("bandwidth probe not run: ", f.allreduce_note));
  }
  add(Level::kInfo, "driver", f.nvml ? str("NVIDIA driver ", f.driver_version)
                                     : std::string("NVML not found (no NVIDIA driver): driver and PCIe links not checked"));
  // NCCL settings.
  if (f.nccl_env.empty()) {
    add(Level::kInfo, "nccl", "no NCCL_* variable set");
  } else {
    std::string list;
    for (const auto& e : f.nccl_env) list += (list.empty() ? "" : " ") + e;
    add(Level::kInfo, "nccl", "in effect: " + list);
  }
  // /dev/shm.
  const int ranks = options.ranks > 0 ? options.ranks : options.expect_gpus > 0 ? options.expect_gpus : [] {
    const char* local = std::getenv("LOCAL_WORLD_SIZE");
    return local ? std::max(1, std::atoi(local)) : 1;
  }();
  if (f.shm_total_bytes < 0) {
    add(Level::kFatal, "shm", "/dev/shm is missing: NCCL's shared-memory transport and the data loader need it",
        "mount a tmpfs on /dev/shm (docker: --shm-size=16g)");
  } else if (f.shm_free_bytes < kShmPerRank * ranks) {
    add(Level::kWarning, "shm", str("/dev/shm has ", gib(f.shm_free_bytes), " free of ", gib(f.shm_total_bytes),
                                    ", under 1 GiB for each of ", ranks, " local rank", ranks == 1 ? "" : "s",
                                    ": NCCL may fail with bus errors"),
        str("docker: --shm-size=", std::max(2, ranks * 2), "g; otherwise mount -o remount,size=", std::max(2, ranks * 2),
            "G /dev/shm"));
  } else {
    add(Level::kOk, "shm", str("/dev/shm: ", gib(f.shm_free_bytes), " free"));
  }
  // Rendezvous port.
  if (f.port_free) {
    add(Level::kOk, "port", str("rendezvous port ", f.port, " is free"));
  } else {
    add(f.port_explicit ? Level::kFatal : Level::kWarning, "port",
        str("rendezvous port ", f.port, f.port_explicit ? " (MASTER_PORT)" : " (the default)", " is in use"),
        str("choose another: ft_launch --master_port ", f.free_port, " (free now)"));
  }
  return out;
}

}  // namespace ft::gpu

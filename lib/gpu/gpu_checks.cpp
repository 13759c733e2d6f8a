#include "gpu/gpu_checks.h"

#include <cstdlib>

#ifdef FT_WITH_NCCL
#include <cuda_runtime.h>
#endif

#include "util/error.h"

namespace ft::gpu {

std::vector<GpuFinding> gpu_findings(const GpuFacts& f, const comm::RankEnv& env) {
  std::vector<GpuFinding> out;
  if (f.visible_devices == 0) return out;
  if (f.visible_devices < env.local_world_size)
    out.push_back({true, str(env.local_world_size, " ranks on this node but only ", f.visible_devices,
                             " visible GPU", f.visible_devices == 1 ? "" : "s",
                             ": two ranks would share a GPU (NCCL refuses that, and memory would not fit); start "
                             "one rank per GPU (--nproc_per_node ", f.visible_devices,
                             ") or check CUDA_VISIBLE_DEVICES")});
  if (f.nccl_p2p_disable_set) return out;
  const int n = std::min(f.visible_devices, env.local_world_size);
  for (int i = 0; i < n; ++i) {
    for (int j = 0; j < n; ++j) {
      if (i == j || f.peer[i][j]) continue;
      if (!geforce40_pair(f.names[i], f.names[j])) continue;
      out.push_back({false, str("GPUs ", i, " and ", j, " (", f.names[i],
                                ") have no peer-to-peer access and NCCL_P2P_DISABLE is not set: with some GeForce "
                                "drivers NCCL then hangs; export NCCL_P2P_DISABLE=1 before starting the run")});
      return out;
    }
  }
  return out;
}

bool geforce40_pair(const std::string& a, const std::string& b) {
  return a.find("RTX 40") != std::string::npos || b.find("RTX 40") != std::string::npos;
}

GpuFacts read_gpu_facts() {
  GpuFacts facts;
#ifdef FT_WITH_NCCL
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess) {
    cudaGetLastError();
    return facts;
  }
  facts.visible_devices = count;
  facts.peer.assign(count, std::vector<bool>(count, true));
  for (int i = 0; i < count; ++i) {
    cudaDeviceProp prop{};
    cudaGetDeviceProperties(&prop, i);
    facts.names.push_back(prop.name);
    facts.memory_bytes.push_back(static_cast<std::int64_t>(prop.totalGlobalMem));
    for (int j = 0; j < count; ++j) {
      int can = 1;
      if (i != j && cudaDeviceCanAccessPeer(&can, i, j) == cudaSuccess) facts.peer[i][j] = can != 0;
    }
  }
  facts.nccl_p2p_disable_set = std::getenv("NCCL_P2P_DISABLE") != nullptr;
#endif
  return facts;
}

std::vector<GpuFinding> check_gpu_setup(const comm::RankEnv& env) { return gpu_findings(read_gpu_facts(), env); }

}  // namespace ft::gpu

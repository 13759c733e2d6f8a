// Start-up checks of the GPU setup that NCCL runs on, with the fix for each finding:
//   - two local ranks on one GPU (fewer visible GPUs than LOCAL_WORLD_SIZE);
//   - a GeForce 40-series pair without peer-to-peer access while NCCL_P2P_DISABLE is unset
//     (the GeForce driver disables P2P between 4090s, and older drivers hang NCCL then:
//     NVIDIA/nccl-tests#117).
// Without CUDA in the build (or without a GPU) there is nothing to check.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "comm/rank_env.h"

namespace ft::gpu {

struct GpuFinding {
  bool fatal = false;    // the run cannot work as set up
  std::string message;   // what is wrong and the fix
};

std::vector<GpuFinding> check_gpu_setup(const comm::RankEnv& env);

// The decision rules on plain facts, for tests without a GPU.
struct GpuFacts {
  int visible_devices = 0;
  std::vector<std::string> names;        // per device
  std::vector<std::vector<bool>> peer;   // peer[i][j]: i can access j
  bool nccl_p2p_disable_set = false;
  std::vector<std::int64_t> memory_bytes;  // per device
};
std::vector<GpuFinding> gpu_findings(const GpuFacts& facts, const comm::RankEnv& env);

// The visible GPUs as CUDA reports them (none without CUDA in the build or without a driver).
GpuFacts read_gpu_facts();

// Two GPUs without peer access where one is a GeForce 40: the pair whose NCCL hangs with some
// drivers unless NCCL_P2P_DISABLE=1.
bool geforce40_pair(const std::string& a, const std::string& b);

}  // namespace ft::gpu

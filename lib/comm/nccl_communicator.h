// The Communicator for CUDA tensors, on the NCCL C API directly (nccl.h; the CUDA runtime API
// only, so it builds against the Debian CPU LibTorch as well as a CUDA LibTorch 2.x). Compiled
// when CMake finds the CUDA toolkit with NCCL (option FT_WITH_NCCL); make_communicator() is the
// way in, and says so when this build has no NCCL.
//   - ncclUniqueId travels through the store; initialization is non-blocking
//     (ncclCommInitRankConfig with blocking = 0) and polled with the timeout, so a rank that never
//     comes leads to ncclCommAbort and an error, not a hang (NVIDIA/nccl#289).
//   - Collectives run on a stream of ours, after the work queued on LibTorch's current stream of
//     the rank's device; Work::wait() polls cudaEventQuery and ncclCommGetAsyncError until the
//     timeout, then aborts the communicator and throws an ft::Error that names the operation and
//     the missing ranks, as the Gloo communicator does.
//   - kAvg is ncclAvg; barrier() is a one-element all_reduce.
//   - A world of one is a real NCCL communicator too (no store needed): make_communicator gives
//     one for parallel.backend "nccl" on a single GPU.
#pragma once

#include <memory>

#include "comm/communicator.h"
#include "comm/rank_env.h"
#include "comm/store.h"

namespace ft::comm {

// Defined only in builds with FT_WITH_NCCL. device_index: the CUDA device this rank uses
// (usually LOCAL_RANK).
std::unique_ptr<Communicator> make_nccl_communicator(const RankEnv& env, std::shared_ptr<Store> store,
                                                     int device_index, double timeout_s);

}  // namespace ft::comm

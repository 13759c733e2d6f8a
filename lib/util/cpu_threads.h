// CPU thread policy. LibTorch on Debian runs matrix products in OpenBLAS (its own pthread pool)
// and everything else in an OpenMP pool; two busy pools on the same cores oversubscribe them.
// Measured on 2 cores (bench_forward_backward): LibTorch 1 thread + OpenBLAS 2 threads gives
// 211 tokens/s on a 100M model and 9500 tokens/s on TinyStories-260K; LibTorch 2 threads gives
// 173 and 2900. So `threads` goes to the BLAS pool and LibTorch's own pool keeps one thread.
#pragma once

#include <cstdint>
#include <string>

namespace ft {

// Sets the BLAS pool to `threads` (when the BLAS exposes a setter) and LibTorch's intra-op pool
// to 1. threads <= 0: every core.
void configure_cpu_threads(int threads);

// The BLAS threads of one rank: train.threads when set (> 0), else the cores shared evenly by the
// `local_ranks` ranks of this node (at least 1).
int threads_per_rank(std::int64_t configured, int local_ranks);

// "OpenBLAS 0.3.21 ..." or "reference BLAS (slow: install libopenblas0-pthread)" or "unknown".
std::string blas_description();

}  // namespace ft

// The matrix-product rate this device reaches, measured: the peak ft_bench's MFU is taken
// against (a datasheet number would flatter a CPU and cannot know a power-capped GPU).
#pragma once

#include <c10/core/Device.h>
#include <c10/core/ScalarType.h>

#include <cstdint>

namespace ft::bench {

struct MatmulPeak {
  double flops_per_s = 0;
  std::int64_t n = 0;  // square matrices n x n
  int threads = 0;     // CPU threads used (0 on a GPU)
};

// The best of several n x n products in `dtype` on `device` (CPU: with `threads` threads);
// n 0: 1024 on the CPU, 8192 on a GPU.
MatmulPeak measure_matmul_peak(c10::Device device, c10::ScalarType dtype, int threads, std::int64_t n = 0);

}  // namespace ft::bench

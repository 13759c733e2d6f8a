// OpenBLAS chooses its kernels by the CPU model when it loads. Debian 12's OpenBLAS 0.3.21 does
// not know newer Xeons (Sapphire and Emerald Rapids, family 6 models 143 and 207) and falls back
// to its Prescott (SSE3) kernels. Measured on such a CPU, 1024x1024 sgemm on one thread:
// Prescott 53 GFLOP/s, SkylakeX (AVX-512) 252, Haswell (AVX2) 131. The kernel set can only be
// chosen before the library loads (OPENBLAS_CORETYPE), so a program that finds the fallback on a
// CPU with AVX2 or AVX-512 starts itself again, same process, with the variable set.
#pragma once

#include <string>

namespace ft {

// What the CPU offers that OpenBLAS's fast kernel sets need (the OS saves the registers too).
struct CpuVectorFeatures {
  bool avx2_fma = false;  // Haswell's kernels
  bool avx512 = false;    // F, BW, DQ and VL: SkylakeX's kernels
};
CpuVectorFeatures cpu_vector_features();

// The OpenBLAS kernel set loaded in this process ("Prescott", "SkylakeX", ...); "" when the BLAS
// is not OpenBLAS.
std::string openblas_core();

// The kernel set to ask for instead of `core` on a CPU with `cpu`, or "" when `core` is not one of
// OpenBLAS's fallbacks or the CPU has nothing better.
std::string better_openblas_core(const std::string& core, const CpuVectorFeatures& cpu);

// Called first in main(): when OPENBLAS_CORETYPE is unset and better_openblas_core() names a kernel
// set, sets the variable (children inherit it) and execs /proc/self/exe with the same arguments.
// Says so once per node (local rank 0). Returns when there is nothing to do or the exec failed.
void restart_with_fast_blas_kernels(char** argv);

}  // namespace ft

// FT_CPU_CLONES before a raw loop: on x86-64 the compiler builds it three times (AVX-512 as
// x86-64-v4, AVX2 with FMA as x86-64-v3, and the baseline) and the program picks the best for the
// CPU when it loads (an ifunc). GCC and clang 14 or newer; others build the baseline only. The
// baseline has no FMA instruction: std::fma becomes a call to libm's fmaf, about 10x slower.
// Measured with clang 14 on this VM's AVX-512 Xeon, one thread: see optim/cpu_kernels.cpp.
#pragma once

#if defined(__x86_64__) && ((defined(__clang__) && __clang_major__ >= 14) || (defined(__GNUC__) && !defined(__clang__)))
#define FT_CPU_CLONES __attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default")))
#else
#define FT_CPU_CLONES
#endif

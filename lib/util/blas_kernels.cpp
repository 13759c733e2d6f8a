#include "util/blas_kernels.h"

#include <dlfcn.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>

namespace ft {

CpuVectorFeatures cpu_vector_features() {
  CpuVectorFeatures f;
#if defined(__x86_64__) || defined(__i386__)
  // libgcc's (and compiler-rt's) checks include the OS's XCR0 state for AVX and AVX-512.
  __builtin_cpu_init();
  f.avx2_fma = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
  f.avx512 = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
             __builtin_cpu_supports("avx512dq") && __builtin_cpu_supports("avx512vl");
#endif
  return f;
}

std::string openblas_core() {
  // OpenBLAS is reached through libblas.so.3 (Debian alternatives): looked up, not linked.
  using GetCore = char* (*)();
  auto get = reinterpret_cast<GetCore>(::dlsym(RTLD_DEFAULT, "openblas_get_corename"));
  const char* name = get != nullptr ? get() : nullptr;
  return name != nullptr ? name : "";
}

std::string better_openblas_core(const std::string& core, const CpuVectorFeatures& cpu) {
  // OpenBLAS's generic x86-64 choices for a CPU it does not know, by the features it found;
  // anything else (Haswell, SkylakeX, Zen, ...) it chose on purpose.
  static const char* const kFallbacks[] = {"Prescott", "Core2", "Penryn", "Dunnington", "Nehalem", "Sandybridge"};
  bool fallback = false;
  for (const char* name : kFallbacks) fallback = fallback || core == name;
  if (!fallback) return "";
  if (cpu.avx512) return "SkylakeX";
  if (cpu.avx2_fma) return "Haswell";
  return "";
}

void restart_with_fast_blas_kernels(char** argv) {
  if (std::getenv("OPENBLAS_CORETYPE") != nullptr) return;  // chosen by the user, or already restarted
  const std::string core = openblas_core();
  const std::string better = better_openblas_core(core, cpu_vector_features());
  if (better.empty()) return;
  ::setenv("OPENBLAS_CORETYPE", better.c_str(), 1);
  const char* local_rank = std::getenv("LOCAL_RANK");
  if (local_rank == nullptr || std::strcmp(local_rank, "0") == 0) {
    std::fprintf(stderr,
                 "%s: OpenBLAS chose its %s kernels for this CPU, which has %s; starting again with "
                 "OPENBLAS_CORETYPE=%s for faster matrix products (set OPENBLAS_CORETYPE to choose yourself)\n",
                 argv[0], core.c_str(), better == "SkylakeX" ? "AVX-512" : "AVX2", better.c_str());
  }
  std::fflush(nullptr);
  ::execv("/proc/self/exe", argv);
  // Still here: run on with the slow kernels rather than not at all.
  std::fprintf(stderr, "%s: could not start again (%s); matrix products use OpenBLAS's %s kernels\n", argv[0],
               std::strerror(errno), core.c_str());
  ::unsetenv("OPENBLAS_CORETYPE");
}

}  // namespace ft

#include "util/cpu_threads.h"

#include <dlfcn.h>

#include <algorithm>

#include <thread>

#include <torch/torch.h>

namespace ft {

void configure_cpu_threads(int threads) {
  if (threads <= 0) threads = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  torch::set_num_threads(1);
  // OpenBLAS is reached through libblas.so.3 (Debian alternatives): look its setter up at run
  // time rather than linking it, so other BLAS builds still work.
  using SetThreads = void (*)(int);
  if (auto set = reinterpret_cast<SetThreads>(::dlsym(RTLD_DEFAULT, "openblas_set_num_threads"))) set(threads);
}

std::string blas_description() {
  using GetConfig = char* (*)();
  if (auto config = reinterpret_cast<GetConfig>(::dlsym(RTLD_DEFAULT, "openblas_get_config"))) {
    return std::string("OpenBLAS ") + config();
  }
  if (::dlsym(RTLD_DEFAULT, "dgemm_") != nullptr) return "a BLAS other than OpenBLAS (if it is the reference BLAS, matrix products are ~40x slower: install libopenblas0-pthread)";
  return "unknown";
}

int threads_per_rank(std::int64_t configured, int local_ranks) {
  if (configured > 0) return static_cast<int>(configured);
  return std::max(1, static_cast<int>(std::thread::hardware_concurrency()) / std::max(1, local_ranks));
}

}  // namespace ft

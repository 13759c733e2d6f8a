#include "util/heap_reuse.h"

#include <cstdlib>

#if defined(__GLIBC__)
#include <malloc.h>
#endif

namespace ft {

bool user_tuned_malloc() {
  for (const char* tuned :
       {"MALLOC_MMAP_THRESHOLD_", "MALLOC_MMAP_MAX_", "MALLOC_TRIM_THRESHOLD_", "MALLOC_TOP_PAD_", "GLIBC_TUNABLES"})
    if (std::getenv(tuned) != nullptr) return true;
  return false;
}

void keep_freed_heap_memory(StepMemory step_memory) {
#if defined(__GLIBC__)
  if (user_tuned_malloc()) return;
  // 32 MiB: glibc refuses more (HEAP_MAX_SIZE / 2 on 64-bit). Setting it also stops the dynamic
  // threshold, and a trim threshold this large keeps freed tops of the heap for the next step.
  ::mallopt(M_MMAP_THRESHOLD, 32 << 20);
  ::mallopt(M_TRIM_THRESHOLD, 1 << 30);
  // No mmap per block: larger blocks come from the heap too. The main arena still falls back to
  // mapped memory when the heap cannot grow, and threads' arenas map what does not fit them.
  if (step_memory == StepMemory::kHost) ::mallopt(M_MMAP_MAX, 0);
#else
  (void)step_memory;
#endif
}

}  // namespace ft

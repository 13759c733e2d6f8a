// A training step allocates and frees the same tensors every step. glibc's malloc serves blocks
// above its mmap threshold (128 KiB, raised on the fly up to 32 MiB) with fresh mmap()s and gives
// freed heap tops back to the kernel, so every step pays page faults and page clearing again:
// perf on the tiny LoRA config showed 10-17% of a rank's time in the kernel, mostly page faults.
// Keeping freed memory in the heap for the next step removes most of that; blocks over 32 MiB
// (glibc's limit for the threshold) are still mapped afresh.
#pragma once

namespace ft {

// Fixes glibc's mmap threshold at its maximum (32 MiB) and stops it trimming the heap, unless
// the user tuned malloc (MALLOC_MMAP_THRESHOLD_, MALLOC_TRIM_THRESHOLD_, MALLOC_TOP_PAD_,
// GLIBC_TUNABLES). Freed memory stays mapped for reuse instead of being returned between steps.
void keep_freed_heap_memory();

}  // namespace ft

// A training step allocates and frees the same tensors every step. glibc's malloc serves blocks
// above its mmap threshold (128 KiB, raised on the fly up to 32 MiB) with fresh mmap()s and gives
// freed heap tops back to the kernel, so every step pays page faults and page clearing again:
// perf on the tiny LoRA config showed 10-17% of a rank's time in the kernel, mostly page faults.
// Keeping freed memory in the heap for the next step removes that. glibc will not raise the
// threshold past 32 MiB, so blocks above it (a 32K vocabulary's logits and head gradient: about
// 100 MB each) stay in the heap only when mmap is turned off altogether.
#pragma once

namespace ft {

// Where a process's step tensors live: on the host (a CPU run: every block, large ones included,
// is kept for reuse) or on a GPU (the host's large blocks are load-time staging copies, better
// handed back to the kernel at once).
enum class StepMemory { kHost, kDevice };

// Fixes glibc's mmap threshold at its maximum (32 MiB) and stops it trimming the heap; for
// StepMemory::kHost also serves blocks over 32 MiB from the heap (no mmap per allocation). Not
// when the user tuned malloc (MALLOC_MMAP_THRESHOLD_, MALLOC_MMAP_MAX_, MALLOC_TRIM_THRESHOLD_,
// MALLOC_TOP_PAD_, GLIBC_TUNABLES). Freed memory stays mapped for reuse instead of being returned
// between steps.
void keep_freed_heap_memory(StepMemory step_memory);

// Whether one of those variables is set: the user's malloc settings win.
bool user_tuned_malloc();

}  // namespace ft

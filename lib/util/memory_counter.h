// Counts the bytes LibTorch allocates on the CPU: a wrapper around its CPU allocator, installed
// once, that keeps the bytes in use and their peak. Resident-set sizes cannot tell this apart:
// they include the pages of memory-mapped safetensors files that loading reads.
#pragma once

#include <cstdint>

namespace ft {

// Installs the counting allocator (idempotent, thread-safe). Tensors allocated before keep their
// own deleters and are not counted.
void install_cpu_memory_counter();
bool cpu_memory_counter_installed();
// Bytes of counted CPU tensors alive now, and the most alive at once since the last reset.
std::int64_t cpu_allocated_bytes();
std::int64_t cpu_peak_allocated_bytes();
// Starts a new peak from the bytes alive now.
void reset_cpu_peak_allocated_bytes();

}  // namespace ft

// The memory this rank's training holds on its device, for metrics.jsonl and for checking the
// planner (ft_plan) against what a run really uses: on the CPU through the counting allocator
// (util/memory_counter.h: every byte LibTorch allocates, which resident-set sizes cannot tell
// from memory-mapped weight files), on a GPU through the CUDA caching allocator's statistics
// (bytes in tensors, not the allocator's cached blocks; CUDA LibTorch builds only).
#pragma once

#include <c10/core/Device.h>

#include <cstdint>

namespace ft::train {

class MemoryTracker {
 public:
  // On the CPU installs the counting allocator: create it before the model is loaded, since
  // tensors allocated earlier are not counted.
  explicit MemoryTracker(c10::Device device);

  std::int64_t allocated_bytes() const;  // held now
  std::int64_t peak_bytes() const;       // the most held at once since the last reset
  void reset_peak();

 private:
  c10::Device device_;
};

}  // namespace ft::train

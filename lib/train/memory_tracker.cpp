#include "train/memory_tracker.h"

#include "util/build_info.h"

#if FT_TORCH_CUDA
#include <c10/cuda/CUDACachingAllocator.h>
#include <c10/cuda/CUDAFunctions.h>
#endif

#include "util/error.h"
#include "util/memory_counter.h"

namespace ft::train {
namespace {

#if FT_TORCH_CUDA
c10::DeviceIndex cuda_index(c10::Device device) {
  return device.has_index() ? device.index() : c10::cuda::current_device();
}
// Index 0 of the statistics arrays is StatType::AGGREGATE (all pools), whose namespace moved
// between LibTorch versions; `auto` takes whichever DeviceStats type this LibTorch returns.
constexpr std::size_t kAggregate = 0;
#endif

}  // namespace

MemoryTracker::MemoryTracker(c10::Device device) : device_(device) {
#if !FT_TORCH_CUDA
  FT_CHECK(device.is_cpu(), "this build's LibTorch has no CUDA: cannot track memory on ", device.str());
#endif
  if (device.is_cpu()) install_cpu_memory_counter();
  reset_peak();
}

std::int64_t MemoryTracker::allocated_bytes() const {
#if FT_TORCH_CUDA
  if (device_.is_cuda())
    return c10::cuda::CUDACachingAllocator::getDeviceStats(cuda_index(device_)).allocated_bytes[kAggregate].current;
#endif
  return cpu_allocated_bytes();
}

std::int64_t MemoryTracker::peak_bytes() const {
#if FT_TORCH_CUDA
  if (device_.is_cuda())
    return c10::cuda::CUDACachingAllocator::getDeviceStats(cuda_index(device_)).allocated_bytes[kAggregate].peak;
#endif
  return cpu_peak_allocated_bytes();
}

void MemoryTracker::reset_peak() {
#if FT_TORCH_CUDA
  if (device_.is_cuda()) {
    c10::cuda::CUDACachingAllocator::resetPeakStats(cuda_index(device_));
    return;
  }
#endif
  reset_cpu_peak_allocated_bytes();
}

}  // namespace ft::train

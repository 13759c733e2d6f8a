#include "util/memory_counter.h"

#include <c10/core/Allocator.h>
#include <c10/core/CPUAllocator.h>

#include <atomic>
#include <mutex>

#include "util/torch_version.h"

namespace ft {
namespace {

std::atomic<std::int64_t> g_allocated{0};
std::atomic<std::int64_t> g_peak{0};
std::atomic<bool> g_installed{false};

void add(std::int64_t bytes) {
  const std::int64_t now = g_allocated.fetch_add(bytes) + bytes;
  std::int64_t peak = g_peak.load();
  while (now > peak && !g_peak.compare_exchange_weak(peak, now)) {
  }
}

// Each allocation carries a header with its size in front of the data, so that the data pointer
// is its own context: LibTorch's raw_allocate (used by some CPU kernels, e.g. bf16 matrix
// products) requires that, and frees through raw_deleter() with the data pointer alone.
// 64 bytes keep the data as aligned as the base allocator's (c10's gAlignment).
constexpr std::size_t kHeader = 64;
c10::Allocator* g_base = nullptr;

void delete_counted(void* data) {
  if (data == nullptr) return;
  void* block = static_cast<char*>(data) - kHeader;
  g_allocated.fetch_sub(static_cast<std::int64_t>(*static_cast<std::size_t*>(block)));
  g_base->raw_deallocate(block);
}

class CountingAllocator final : public c10::Allocator {
 public:
  // LibTorch 2.3 made allocate() non-const and added copy_data() (used by clone()).
#if FT_TORCH_AT_LEAST(2, 3)
  c10::DataPtr allocate(std::size_t bytes) override { return counted(bytes); }
  void copy_data(void* dest, const void* src, std::size_t count) const override { default_copy_data(dest, src, count); }
#else
  c10::DataPtr allocate(std::size_t bytes) const override { return counted(bytes); }
#endif
  c10::DeleterFnPtr raw_deleter() const override { return &delete_counted; }

 private:
  static c10::DataPtr counted(std::size_t bytes) {
    void* block = g_base->raw_allocate(bytes + kHeader);
    *static_cast<std::size_t*>(block) = bytes;
    add(static_cast<std::int64_t>(bytes));
    void* data = static_cast<char*>(block) + kHeader;
    return {data, data, &delete_counted, c10::Device(c10::DeviceType::CPU)};
  }
};

}  // namespace

void install_cpu_memory_counter() {
  static std::once_flag once;
  std::call_once(once, [] {
    g_base = c10::GetCPUAllocator();
    static CountingAllocator allocator;
    // Priority above the default CPU allocator's registration (0), so it takes over.
    c10::SetCPUAllocator(&allocator, /*priority=*/1);
    g_installed = true;
  });
}

bool cpu_memory_counter_installed() { return g_installed.load(); }
std::int64_t cpu_allocated_bytes() { return g_allocated.load(); }
std::int64_t cpu_peak_allocated_bytes() { return g_peak.load(); }
void reset_cpu_peak_allocated_bytes() { g_peak = g_allocated.load(); }

}  // namespace ft

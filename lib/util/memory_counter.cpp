#include "util/memory_counter.h"

#include <c10/core/Allocator.h>
#include <c10/core/CPUAllocator.h>

#include <atomic>
#include <mutex>

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

// Owns the wrapped allocation; freeing it un-counts the bytes.
struct Counted {
  c10::DataPtr inner;
  std::int64_t bytes;
};

void delete_counted(void* context) {
  auto* counted = static_cast<Counted*>(context);
  g_allocated.fetch_sub(counted->bytes);
  delete counted;
}

class CountingAllocator final : public c10::Allocator {
 public:
  explicit CountingAllocator(c10::Allocator* base) : base_(base) {}

  c10::DataPtr allocate(std::size_t bytes) const override {
    c10::DataPtr inner = base_->allocate(bytes);
    void* data = inner.get();
    const c10::Device device = inner.device();
    auto* counted = new Counted{std::move(inner), static_cast<std::int64_t>(bytes)};
    add(counted->bytes);
    return {data, counted, &delete_counted, device};
  }
  // No raw deleter: each allocation's context must come back to delete_counted.
  c10::DeleterFnPtr raw_deleter() const override { return nullptr; }

 private:
  c10::Allocator* base_;
};

}  // namespace

void install_cpu_memory_counter() {
  static std::once_flag once;
  std::call_once(once, [] {
    static CountingAllocator allocator(c10::GetCPUAllocator());
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

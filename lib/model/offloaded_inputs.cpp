#include "model/offloaded_inputs.h"

#include <c10/core/StreamGuard.h>
#include <c10/core/impl/VirtualGuardImpl.h>
#include <torch/torch.h>

#include "util/error.h"

namespace ft::model {

std::size_t OffloadedInputs::put(const at::Tensor& x) {
  FT_ASSERT(x.device().type() != c10::kCPU, "offloaded inputs are device tensors");
  FT_ASSERT(entries_.empty() || device_ == x.device(), "one forward pass, one device");
  device_ = x.device();
  Entry e;
  e.host = torch::empty(x.sizes(), x.options().device(torch::kCPU).pinned_memory(true));
  e.host.copy_(x, /*non_blocking=*/true);
  entries_.push_back(std::move(e));
  return entries_.size() - 1;
}

// The device-generic stream API (c10::Event, VirtualGuardImpl): compiled in every LibTorch, used
// only with a GPU tensor.
void OffloadedInputs::start_copy_back(std::size_t slot) {
  Entry& e = entries_[slot];
  if (!e.host.defined() || e.arriving.defined()) return;
  const c10::impl::VirtualGuardImpl guard(device_.type());
  const c10::Stream compute = guard.getStream(device_);
  compute_stream_ = compute;
  if (!copy_stream_) copy_stream_ = guard.getStreamFromGlobalPool(device_);
  // Allocated for the compute stream, which will read it and free it. The copy stream first waits
  // for everything the compute stream has queued so far: the forward's copy to host, and any
  // kernel still reading memory the allocator just handed out again.
  e.arriving = torch::empty(e.host.sizes(), e.host.options().device(device_).pinned_memory(false));
  c10::Event issued(device_.type());
  issued.record(compute);
  issued.block(*copy_stream_);
  {
    c10::StreamGuard on_copy_stream(*copy_stream_);
    e.arriving.copy_(e.host, /*non_blocking=*/true);  // the host allocator keeps e.host until done
  }
  e.ready.emplace(device_.type());
  e.ready->record(*copy_stream_);
}

// A copy started ahead and never taken (backward stopped by an error, or the graph dropped): the
// compute stream waits for it before the allocator can hand its memory to the compute stream's
// next tensor, which the copy would otherwise still be writing.
OffloadedInputs::~OffloadedInputs() {
  for (Entry& e : entries_) {
    if (!e.ready || !compute_stream_) continue;
    try {
      e.ready->block(*compute_stream_);
    } catch (...) {  // a destructor: the device is already failing, nothing better to do
    }
  }
}

at::Tensor OffloadedInputs::take(std::size_t slot) {
  FT_ASSERT(slot < entries_.size(), "offloaded input ", slot, " of ", entries_.size());
  Entry& e = entries_[slot];
  FT_CHECK(e.host.defined(), "backward reached an offloaded checkpoint twice (train.offload_activations keeps no "
                             "layer input for a second backward)");
  at::Tensor x;
  if (e.arriving.defined()) {
    const c10::impl::VirtualGuardImpl guard(device_.type());
    e.ready->block(guard.getStream(device_));  // the compute stream waits for the copy, the host does not
    x = std::move(e.arriving);
  } else {
    x = e.host.to(device_, /*non_blocking=*/true);  // not started ahead (the last layer): on the compute stream
  }
  e = Entry{};
  if (prefetch_ && slot > 0) start_copy_back(slot - 1);
  return x;
}

std::shared_ptr<OffloadedInputs> OffloadSessions::for_layer(std::size_t index) {
  if (!current_ || index <= last_index_) current_ = std::make_shared<OffloadedInputs>(prefetch_);
  last_index_ = index;
  return current_;
}

}  // namespace ft::model

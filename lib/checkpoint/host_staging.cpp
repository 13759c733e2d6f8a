#include "checkpoint/host_staging.h"

#include <torch/torch.h>

namespace ft::checkpoint {

at::Tensor HostStaging::copy(const std::string& name, const at::Tensor& source, at::ScalarType dtype) {
  at::Tensor& buffer = buffers_[name];
  if (!buffer.defined() || buffer.sizes() != source.sizes() || buffer.scalar_type() != dtype ||
      buffer.is_pinned() != source.is_cuda()) {
    buffer = at::Tensor();  // the old one freed first
    buffer = at::empty(source.sizes(), source.options().dtype(dtype).device(at::kCPU).pinned_memory(source.is_cuda()));
  }
  buffer.copy_(source.detach());
  return buffer;
}

}  // namespace ft::checkpoint

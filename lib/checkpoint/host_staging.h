// Host memory that background saves copy into (checkpoint.async), kept from one save to the next:
// allocating and first touching a gigabyte of fresh pages for every save cost more than the copy
// itself (100M full fine-tune, 2 ranks: with fresh buffers a later save held training 2.15 s, with
// kept ones 0.37 s; the first save, which allocates, 0.92 s).
// Pinned when the source is on a GPU, so the copies run at full PCIe speed. A buffer is reused
// only once the save that used it is written (at most one save is in flight).
#pragma once

#include <ATen/core/Tensor.h>

#include <map>
#include <string>

namespace ft::checkpoint {

class HostStaging {
 public:
  // A host copy of `source` in `dtype`, in the buffer kept under `name` (made anew when the
  // shape or dtype changed).
  at::Tensor copy(const std::string& name, const at::Tensor& source, at::ScalarType dtype);
  at::Tensor copy(const std::string& name, const at::Tensor& source) { return copy(name, source, source.scalar_type()); }

 private:
  std::map<std::string, at::Tensor> buffers_;
};

}  // namespace ft::checkpoint

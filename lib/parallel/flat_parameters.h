// Trainable parameters laid out in one flat buffer: every parameter's data (and its .grad)
// becomes a view into a contiguous tensor, so optimizers, clipping and collectives work on one
// or a few large tensors instead of hundreds of small ones. Autograd accumulates straight into
// the flat gradient because each .grad is defined (a view) before backward runs.
#pragma once

#include <ATen/core/Tensor.h>

#include <string>
#include <utility>
#include <vector>

#include "optim/adamw.h"

namespace ft::parallel {

struct FlatSlot {
  std::string name;
  std::int64_t offset = 0;
  std::int64_t numel = 0;
  std::vector<std::int64_t> shape;
};

class FlatParameters {
 public:
  // Copies the parameters into a flat buffer of their (common) dtype, padded with zeros to a
  // multiple of `align` elements, and re-points each parameter and its gradient into it.
  FlatParameters(std::vector<std::pair<std::string, at::Tensor>> params, std::int64_t align = 1);

  at::Tensor& values() { return values_; }
  at::Tensor& grads() { return grads_; }
  std::int64_t numel() const { return values_.numel(); }      // padded
  std::int64_t used_numel() const { return used_; }            // without padding
  const std::vector<FlatSlot>& slots() const { return slots_; }
  // Weight-decay segments: no decay on 1-D parameters (norm weights) and padding.
  std::vector<optim::DecaySegment> decay_segments() const;
  void zero_grads() { grads_.zero_(); }

 private:
  std::vector<std::pair<std::string, at::Tensor>> params_;
  std::vector<FlatSlot> slots_;
  at::Tensor values_, grads_;
  std::int64_t used_ = 0;
};

}  // namespace ft::parallel

// Trainable parameters laid out in one flat buffer: every parameter's data (and its .grad)
// becomes a view into a contiguous tensor, so optimizers, clipping and collectives work on one
// or a few large tensors instead of hundreds of small ones. Autograd accumulates straight into
// the flat gradient because each .grad is defined (a view) before backward runs. A layout may
// leave gaps (ZeRO pads each gradient bucket to a multiple of the world size); ZeRO-2 keeps no
// flat gradient at all (with_grads = false: autograd allocates each .grad, the strategy frees it).
#pragma once

#include <ATen/core/Tensor.h>

#include <optional>
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
  // Parameter i at element offsets[i] of a zero-filled buffer of `numel` elements (offsets in
  // increasing order, no overlaps); without a flat gradient when with_grads is false.
  // The buffer is on `device` (default: the parameters'), and the parameters move there with it.
  FlatParameters(std::vector<std::pair<std::string, at::Tensor>> params, const std::vector<std::int64_t>& offsets,
                 std::int64_t numel, bool with_grads, std::optional<c10::Device> device = std::nullopt);

  at::Tensor& values() { return values_; }
  at::Tensor& grads() { return grads_; }                      // undefined without a flat gradient
  const at::Tensor& values() const { return values_; }
  const at::Tensor& grads() const { return grads_; }
  std::int64_t numel() const { return values_.numel(); }      // padded
  std::int64_t used_numel() const { return used_; }            // without padding
  const std::vector<FlatSlot>& slots() const { return slots_; }
  // Weight-decay segments of the buffer (see parallel::decay_segments).
  std::vector<optim::DecaySegment> decay_segments(bool decay_norms = false) const;
  void zero_grads();

 private:
  void build(const std::vector<std::int64_t>& offsets, std::int64_t numel, bool with_grads,
             std::optional<c10::Device> device = std::nullopt);

  std::vector<std::pair<std::string, at::Tensor>> params_;
  std::vector<FlatSlot> slots_;
  at::Tensor values_, grads_;
  std::int64_t used_ = 0;
};

// Weight-decay segments of a flat buffer of `numel` elements holding `slots` (in increasing
// offset order): no decay on padding, nor on 1-D parameters (norm weights) unless decay_norms.
std::vector<optim::DecaySegment> decay_segments(const std::vector<FlatSlot>& slots, std::int64_t numel,
                                                bool decay_norms);

}  // namespace ft::parallel

#include "parallel/flat_parameters.h"

#include <torch/torch.h>

#include "util/error.h"

namespace ft::parallel {

FlatParameters::FlatParameters(std::vector<std::pair<std::string, at::Tensor>> params, std::int64_t align)
    : params_(std::move(params)) {
  FT_CHECK(!params_.empty(), "there are no trainable parameters");
  FT_ASSERT(align >= 1, "align >= 1, got ", align);
  std::vector<std::int64_t> offsets;
  std::int64_t used = 0;
  for (const auto& [name, p] : params_) {
    offsets.push_back(used);
    used += p.numel();
  }
  build(offsets, (used + align - 1) / align * align, /*with_grads=*/true);
}

FlatParameters::FlatParameters(std::vector<std::pair<std::string, at::Tensor>> params,
                               const std::vector<std::int64_t>& offsets, std::int64_t numel, bool with_grads,
                               std::optional<c10::Device> device)
    : params_(std::move(params)) {
  FT_CHECK(!params_.empty(), "there are no trainable parameters");
  build(offsets, numel, with_grads, device);
}

void FlatParameters::build(const std::vector<std::int64_t>& offsets, std::int64_t numel, bool with_grads,
                           std::optional<c10::Device> target) {
  FT_ASSERT(offsets.size() == params_.size(), "one offset per parameter");
  const auto dtype = params_[0].second.scalar_type();
  const auto device = params_[0].second.device();
  std::int64_t end = 0;
  for (std::size_t i = 0; i < params_.size(); ++i) {
    const auto& [name, p] = params_[i];
    FT_ASSERT(p.scalar_type() == dtype && p.device() == device, "trainable parameters share dtype and device: ", name);
    FT_ASSERT(offsets[i] >= end, "parameter offsets increase without overlaps: ", name);
    slots_.push_back({name, offsets[i], p.numel(), p.sizes().vec()});
    end = offsets[i] + p.numel();
    used_ += p.numel();
  }
  FT_ASSERT(end <= numel, "the flat buffer (", numel, " elements) holds every parameter (", end, ")");
  auto options = torch::TensorOptions().dtype(dtype).device(target.value_or(device));
  values_ = torch::zeros({numel}, options);
  if (with_grads) grads_ = torch::zeros({numel}, options);
  torch::NoGradGuard no_grad;
  for (std::size_t i = 0; i < params_.size(); ++i) {
    at::Tensor& p = params_[i].second;
    const FlatSlot& s = slots_[i];
    auto view = values_.narrow(0, s.offset, s.numel).view(s.shape);
    view.copy_(p);
    p.set_data(view);
    if (with_grads) {
      p.mutable_grad() = grads_.narrow(0, s.offset, s.numel).view(s.shape);
    } else {
      p.mutable_grad().reset();
    }
  }
}

void FlatParameters::zero_grads() {
  if (grads_.defined()) grads_.zero_();
}

std::vector<optim::DecaySegment> FlatParameters::decay_segments(bool decay_norms) const {
  return parallel::decay_segments(slots_, numel(), decay_norms);
}

std::vector<optim::DecaySegment> decay_segments(const std::vector<FlatSlot>& slots, std::int64_t numel,
                                                bool decay_norms) {
  // Slots in order; gaps between them (a layout's padding) and the tail decay nothing.
  std::vector<optim::DecaySegment> segments;
  std::int64_t end = 0;
  for (const FlatSlot& s : slots) {
    FT_ASSERT(s.offset >= end, "slots in increasing offset order: ", s.name);
    if (s.offset > end) segments.push_back({end, s.offset - end, false});
    segments.push_back({s.offset, s.numel, decay_norms || s.shape.size() > 1});
    end = s.offset + s.numel;
  }
  if (numel > end) segments.push_back({end, numel - end, false});
  return segments;
}

}  // namespace ft::parallel

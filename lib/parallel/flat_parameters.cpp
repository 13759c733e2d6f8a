#include "parallel/flat_parameters.h"

#include <torch/torch.h>

#include "util/error.h"

namespace ft::parallel {

FlatParameters::FlatParameters(std::vector<std::pair<std::string, at::Tensor>> params, std::int64_t align)
    : params_(std::move(params)) {
  FT_CHECK(!params_.empty(), "there are no trainable parameters");
  const auto dtype = params_[0].second.scalar_type();
  const auto device = params_[0].second.device();
  for (const auto& [name, p] : params_) {
    FT_ASSERT(p.scalar_type() == dtype && p.device() == device, "trainable parameters share dtype and device: ", name);
    slots_.push_back({name, used_, p.numel(), p.sizes().vec()});
    used_ += p.numel();
  }
  const std::int64_t padded = (used_ + align - 1) / align * align;
  auto options = torch::TensorOptions().dtype(dtype).device(device);
  values_ = torch::zeros({padded}, options);
  grads_ = torch::zeros({padded}, options);
  torch::NoGradGuard no_grad;
  for (std::size_t i = 0; i < params_.size(); ++i) {
    at::Tensor& p = params_[i].second;
    const FlatSlot& s = slots_[i];
    auto view = values_.narrow(0, s.offset, s.numel).view(s.shape);
    view.copy_(p);
    p.set_data(view);
    p.mutable_grad() = grads_.narrow(0, s.offset, s.numel).view(s.shape);
  }
}

std::vector<optim::DecaySegment> FlatParameters::decay_segments() const {
  std::vector<optim::DecaySegment> segments;
  for (const FlatSlot& s : slots_) segments.push_back({s.offset, s.numel, s.shape.size() > 1});
  if (numel() > used_) segments.push_back({used_, numel() - used_, false});
  return segments;
}

}  // namespace ft::parallel

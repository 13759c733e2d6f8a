// AdamW over a flat fp32 buffer: the fused CPU pass (cpu_kernels.cpp, split by at::parallel_for)
// and, for CUDA, the tensor-op sequence of torch.optim.AdamW's _single_tensor_adamw; segment
// bookkeeping for sharded buffers; state save and restore. amsgrad, maximize, capturable and
// non-fp32 master weights are not supported.
#include "optim/adamw.h"

#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <ATen/core/grad_mode.h>

#include <algorithm>
#include <cmath>
#include <sstream>

#include "optim/cpu_kernels.h"
#include "util/error.h"

namespace ft::optim {
namespace {

// Elements per at::parallel_for task: large enough that a task streams ~1 MB per array.
constexpr std::int64_t kGrain = 1 << 18;

std::string describe(const at::Tensor& t) {
  if (!t.defined()) return "an undefined tensor";
  std::ostringstream out;
  out << t.dtype() << " " << t.sizes() << " on " << t.device();
  return out.str();
}

std::string key_list(const std::map<std::string, at::Tensor>& tensors) {
  std::string out;
  for (const auto& [key, value] : tensors) out += (out.empty() ? "" : ", ") + key;
  return out.empty() ? "nothing" : out;
}

}  // namespace

std::vector<DecaySegment> uniform_segments(std::int64_t numel, bool decay) {
  FT_CHECK(numel >= 0, "uniform_segments: numel must be >= 0, got ", numel);
  return {DecaySegment{0, numel, decay}};
}

void check_segments(const std::vector<DecaySegment>& segments, std::int64_t numel) {
  std::int64_t expected_offset = 0;
  for (std::size_t i = 0; i < segments.size(); ++i) {
    const DecaySegment& s = segments[i];
    FT_CHECK(s.length >= 0, "weight-decay segment ", i, " has negative length ", s.length);
    FT_CHECK(s.offset == expected_offset, "weight-decay segment ", i, " starts at ", s.offset,
             ", expected ", expected_offset,
             " (segments must be in order and cover the buffer without gaps or overlaps)");
    expected_offset += s.length;
  }
  FT_CHECK(expected_offset == numel, "weight-decay segments cover ", expected_offset,
           " elements, but the buffer has ", numel);
}

std::vector<DecaySegment> slice_segments(const std::vector<DecaySegment>& segments, std::int64_t offset,
                                         std::int64_t length) {
  const std::int64_t total = segments.empty() ? 0 : segments.back().offset + segments.back().length;
  check_segments(segments, total);
  FT_CHECK(offset >= 0 && length >= 0 && offset + length <= total, "slice_segments: elements [", offset,
           ", ", offset + length, ") are not inside the buffer of ", total, " elements");
  std::vector<DecaySegment> out;
  for (const DecaySegment& s : segments) {
    const std::int64_t lo = std::max(s.offset, offset), hi = std::min(s.offset + s.length, offset + length);
    if (lo < hi) out.push_back({lo - offset, hi - lo, s.decay});
  }
  if (out.empty()) out.push_back({0, 0, true});
  return out;
}

AdamW::AdamW(std::int64_t numel, std::vector<DecaySegment> segments, AdamWOptions options, c10::Device device)
    : numel_(numel), segments_(std::move(segments)), options_(options), device_(device) {
  FT_CHECK(numel >= 0, "AdamW: numel must be >= 0, got ", numel);
  FT_CHECK(options.beta1 >= 0 && options.beta1 < 1, "AdamW: beta1 must be in [0, 1), got ", options.beta1);
  FT_CHECK(options.beta2 >= 0 && options.beta2 < 1, "AdamW: beta2 must be in [0, 1), got ", options.beta2);
  FT_CHECK(options.eps >= 0, "AdamW: eps must be >= 0, got ", options.eps);
  FT_CHECK(options.weight_decay >= 0, "AdamW: weight_decay must be >= 0, got ", options.weight_decay);
  check_segments(segments_, numel_);
  for (const DecaySegment& s : segments_) {
    if (s.length == 0) continue;
    if (!runs_.empty() && runs_.back().decay == s.decay) {
      runs_.back().length += s.length;
    } else {
      runs_.push_back(s);
    }
  }
  const auto fp32 = at::TensorOptions().dtype(at::kFloat).device(device_);
  exp_avg_ = at::zeros({numel_}, fp32);
  exp_avg_sq_ = at::zeros({numel_}, fp32);
}

void AdamW::check_buffer(const at::Tensor& t, const char* name) const {
  FT_CHECK(t.defined() && t.scalar_type() == at::kFloat && t.dim() == 1 && t.numel() == numel_ &&
               t.is_contiguous() && t.device() == device_,
           "AdamW::step: ", name, " must be a contiguous float [", numel_, "] tensor on ", device_,
           ", got ", describe(t), t.defined() && !t.is_contiguous() ? " (not contiguous)" : "");
}

void AdamW::step(const at::Tensor& params, const at::Tensor& grad, double lr) {
  check_buffer(params, "params");
  check_buffer(grad, "grad");
  FT_CHECK(std::isfinite(lr) && lr >= 0, "AdamW::step: lr must be a finite number >= 0, got ", lr);
  if (device_.is_cpu() && options_.fused_cpu) {
    step_fused_cpu(params, grad, lr);
  } else {
    step_tensor_ops(params, grad, lr);
  }
}

void AdamW::step_fused_cpu(const at::Tensor& params, const at::Tensor& grad, double lr) {
  const auto c = cpu::adamw_coefficients(lr, options_.beta1, options_.beta2, options_.eps,
                                         options_.weight_decay, step_ + 1);
  float* p = params.data_ptr<float>();
  const float* g = grad.data_ptr<float>();
  float* m = exp_avg_.data_ptr<float>();
  float* v = exp_avg_sq_.data_ptr<float>();
  const auto& runs = runs_;
  at::parallel_for(0, numel_, kGrain, [&](std::int64_t begin, std::int64_t end) {
    // First run that ends after `begin`; runs are sorted and contiguous.
    auto it = std::upper_bound(runs.begin(), runs.end(), begin, [](std::int64_t x, const DecaySegment& r) {
      return x < r.offset + r.length;
    });
    for (; it != runs.end() && it->offset < end; ++it) {
      const std::int64_t lo = std::max(begin, it->offset), hi = std::min(end, it->offset + it->length);
      cpu::adamw_update(p + lo, g + lo, m + lo, v + lo, hi - lo, c, it->decay ? c.decay_factor : 1.0f);
    }
  });
  ++step_;
}

void AdamW::step_tensor_ops(const at::Tensor& params, const at::Tensor& grad, double lr) {
  // torch/optim/adamw.py _single_tensor_adamw, op for op. The scalars are the fp32 values that
  // PyTorch's kernels would round the Python floats to, so both paths see the same numbers.
  at::NoGradGuard no_grad;
  const auto c = cpu::adamw_coefficients(lr, options_.beta1, options_.beta2, options_.eps,
                                         options_.weight_decay, step_ + 1);
  if (options_.weight_decay != 0) {
    for (const DecaySegment& r : runs_) {
      if (r.decay) params.narrow(0, r.offset, r.length).mul_(c.decay_factor);
    }
  }
  exp_avg_.mul_(c.beta1).add_(grad, c.one_minus_beta1);
  exp_avg_sq_.mul_(c.beta2).addcmul_(grad, grad, c.one_minus_beta2);
  const at::Tensor denom = (exp_avg_sq_.sqrt() / c.bias_correction2_sqrt).add_(c.eps);
  params.addcdiv_(exp_avg_, denom, c.neg_step_size);
  ++step_;
}

AdamWState AdamW::state() const { return AdamWState{step_, exp_avg_, exp_avg_sq_}; }

void AdamW::set_step_count(std::int64_t step) {
  FT_CHECK(step >= 0, "AdamW state: step must be >= 0, got ", step);
  step_ = step;
}

void AdamW::load_state(const AdamWState& state) {
  FT_CHECK(state.step >= 0, "AdamW state: step must be >= 0, got ", state.step);
  auto check = [&](const at::Tensor& t, const char* name) {
    FT_CHECK(t.defined() && t.scalar_type() == at::kFloat && t.dim() == 1 && t.numel() == numel_,
             "AdamW state: '", name, "' must be a float [", numel_, "] tensor, got ", describe(t),
             " (hint: was the checkpoint written for another model, LoRA config or world size?)");
  };
  check(state.exp_avg, "exp_avg");
  check(state.exp_avg_sq, "exp_avg_sq");
  at::NoGradGuard no_grad;
  exp_avg_.copy_(state.exp_avg);
  exp_avg_sq_.copy_(state.exp_avg_sq);
  step_ = state.step;
}

std::map<std::string, at::Tensor> AdamW::state_tensors() const {
  return {{"step", at::scalar_tensor(step_, at::TensorOptions().dtype(at::kLong))},
          {"exp_avg", exp_avg_},
          {"exp_avg_sq", exp_avg_sq_}};
}

void AdamW::load_state_tensors(const std::map<std::string, at::Tensor>& tensors, const std::string& source) {
  static const char* const kKeys[] = {"step", "exp_avg", "exp_avg_sq"};
  for (const char* key : kKeys) {
    FT_CHECK(tensors.count(key), source, ": AdamW state has no '", key, "' (found: ", key_list(tensors), ")");
  }
  for (const auto& [key, value] : tensors) {
    FT_CHECK(key == "step" || key == "exp_avg" || key == "exp_avg_sq", source,
             ": unexpected AdamW state tensor '", key, "' (expected step, exp_avg, exp_avg_sq)");
  }
  const at::Tensor& step = tensors.at("step");
  FT_CHECK(step.defined() && step.numel() == 1 && at::isIntegralType(step.scalar_type(), /*includeBool=*/false),
           source, ": AdamW state 'step' must be a one-element integer tensor, got ", describe(step));
  AdamWState state{step.item<std::int64_t>(), tensors.at("exp_avg"), tensors.at("exp_avg_sq")};
  try {
    load_state(state);
  } catch (const Error& e) {
    throw Error(source + ": " + e.what());
  }
}

}  // namespace ft::optim

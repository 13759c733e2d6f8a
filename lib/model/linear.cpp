#include "model/linear.h"

#include <torch/torch.h>

#include "model/fused_layer_ops.h"
#include "model/lora_branch.h"
#include "model/quantized_linear.h"
#include "util/error.h"

namespace ft::model {

LinearImpl::LinearImpl(std::int64_t in_features, std::int64_t out_features,
                       const torch::TensorOptions& options, Quantization quantize, bool with_bias)
    : in_features_(in_features), out_features_(out_features) {
  if (quantize == Quantization::kNone) {
    weight = register_parameter("weight", torch::empty({out_features, in_features}, options));
  } else {
    weight_quantized = register_module(
        "weight_quantized", QuantizedWeight(out_features, in_features, quantize, options.device()));
  }
  if (with_bias) bias = register_parameter("bias", torch::empty({out_features}, options));
}

torch::Device LinearImpl::device() const {
  return is_quantized() ? weight_quantized->device() : weight.device();
}

void LinearImpl::set_weight(const torch::Tensor& value) {
  torch::NoGradGuard no_grad;
  if (is_quantized()) {
    weight_quantized->assign(value);
  } else {
    weight.copy_(value);
  }
}

torch::Tensor LinearImpl::dense_weight(c10::ScalarType dtype) const {
  return is_quantized() ? weight_quantized->dequantize(dtype) : weight.detach().to(dtype);
}

void LinearImpl::quantize_weight(Quantization quantize) {
  FT_CHECK(!is_quantized(), "the weight is already quantized (", quantization_name(quantization()), ")");
  if (quantize == Quantization::kNone) return;
  weight_quantized = register_module("weight_quantized", QuantizedWeight(weight, quantize));
  parameters_.erase("weight");  // frees the dense copy once nothing else holds it
  weight = torch::Tensor();
}

void LinearImpl::dequantize_weight(c10::ScalarType dtype) {
  if (!is_quantized()) return;
  torch::Tensor dense = weight_quantized->dequantize(dtype);
  unregister_module("weight_quantized");
  weight_quantized = nullptr;
  weight = register_parameter("weight", dense, /*requires_grad=*/false);
}

torch::Tensor LinearImpl::base_forward(const torch::Tensor& x) {
  if (!is_quantized())
    return bias.defined() ? torch::nn::functional::linear(x, weight, bias) : torch::nn::functional::linear(x, weight);
  torch::Tensor y = quantized_linear(x, weight_quantized);
  return bias.defined() ? y + bias.to(y.scalar_type()) : y;
}

torch::Tensor LinearImpl::forward_swiglu(const torch::Tensor& gate, const torch::Tensor& up) {
  const torch::Tensor x = fused_swiglu(gate, up);
  if (!fused_lora_branch()) return forward(x);
  return lora_branch_of_swiglu(x, gate, up, base_forward(x), lora_A->weight, lora_B->weight, lora_scale_);
}

torch::Tensor LinearImpl::forward(const torch::Tensor& x) {
  const torch::Tensor y = base_forward(x);
  if (!lora_A) return y;  // full fine-tuning and plain inference: one branch-free check
  // PEFT casts the input to the adapter's dtype (fp32), adds the branch to the base output
  // (promoting to fp32) and casts the sum back once.
  if (fused_lora_branch()) return lora_branch(x, y, lora_A->weight, lora_B->weight, lora_scale_);
  auto h = x.to(lora_A->weight.scalar_type());
  if (lora_dropout_ > 0 && is_training()) h = torch::dropout(h, lora_dropout_, /*train=*/true);
  if (is_training()) {
    // The same sum in two products: the scale folded into the second (addmm's alpha) and the base
    // output added by it (beta), instead of separate passes for the scale and the sum.
    // Evaluation keeps PEFT's order below.
    const auto rows = h.numel() / in_features_;
    auto ha = at::mm(h.reshape({rows, in_features_}), lora_A->weight.t());
    auto sum = at::addmm(y.to(ha.scalar_type()).reshape({rows, out_features_}), ha, lora_B->weight.t(), 1, lora_scale_);
    return sum.view(y.sizes()).to(x.scalar_type());
  }
  auto delta = torch::nn::functional::linear(torch::nn::functional::linear(h, lora_A->weight), lora_B->weight);
  return (y + delta * lora_scale_).to(x.scalar_type());
}

void LinearImpl::enable_lora(std::int64_t r, double scale, double dropout) {
  FT_CHECK(!has_lora(), "LoRA is already enabled on this layer (rank ", lora_rank(), ")");
  FT_CHECK(r > 0, "LoRA rank must be positive, got ", r);
  FT_CHECK(dropout >= 0 && dropout < 1, "LoRA dropout must be in [0, 1), got ", dropout);
  auto options = torch::TensorOptions().dtype(torch::kFloat).device(device()).requires_grad(false);
  lora_A = register_module("lora_A", std::make_shared<LinearImpl>(in_features_, r, options));
  lora_B = register_module("lora_B", std::make_shared<LinearImpl>(r, out_features_, options));
  // Zeros, not garbage: uninitialized memory may hold NaN, and 0 * NaN would poison the output.
  torch::NoGradGuard no_grad;
  lora_A->weight.zero_();
  lora_B->weight.zero_();
  lora_A->train(is_training());
  lora_B->train(is_training());
  lora_scale_ = scale;
  lora_dropout_ = dropout;
}

void LinearImpl::disable_lora() {
  if (!has_lora()) return;
  unregister_module("lora_A");
  unregister_module("lora_B");
  lora_A.reset();
  lora_B.reset();
  lora_scale_ = 0;
  lora_dropout_ = 0;
}

EmbeddingImpl::EmbeddingImpl(std::int64_t vocab_size, std::int64_t dim, const torch::TensorOptions& options) {
  weight = register_parameter("weight", torch::empty({vocab_size, dim}, options));
}

torch::Tensor EmbeddingImpl::forward(const torch::Tensor& ids) { return torch::embedding(weight, ids); }

}  // namespace ft::model

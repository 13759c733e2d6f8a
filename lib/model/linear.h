// A linear layer y = x W^T (+ b) with HF's parameter names ("weight" [out, in], and "bias" [out]
// when the layer has one: qwen2's q/k/v_proj, llama's with attention_bias), and
// an optional LoRA branch with PEFT's names (children "lora_A" [r, in] and "lora_B" [out, r]).
// Parameters are created uninitialized in the requested dtype/device (weights are loaded or
// initialized explicitly), so building a 13B model never allocates an fp32 copy first.
// A frozen base weight may instead be stored quantized (int8 or NF4, model/quantization.h): then
// there is no "weight" parameter, only the child "weight_quantized", and forward dequantizes it
// on the fly (model/quantized_linear.h). The bias always stays a dense parameter in the model's
// dtype: LoRA leaves it in the base (frozen), full fine-tuning trains it like any parameter.
#pragma once

#include <torch/nn/module.h>
#include <torch/nn/pimpl.h>

#include <memory>

#include "model/quantization.h"

namespace ft::model {

class LinearImpl : public torch::nn::Module {
 public:
  // With `quantize` int8/nf4: quantized storage on options' device instead of the weight. With
  // `with_bias`: a "bias" parameter [out] in options' dtype (also when quantized).
  LinearImpl(std::int64_t in_features, std::int64_t out_features, const torch::TensorOptions& options,
             Quantization quantize = Quantization::kNone, bool with_bias = false);
  // x [..., in] -> [..., out] (+ bias). With LoRA (PEFT's math): base(x) + lora_B(lora_A(dropout(x))) * scale,
  // the branch in fp32 and the sum cast back to x's dtype; dropout only in training mode.
  torch::Tensor forward(const torch::Tensor& x);
  // forward(fused_swiglu(gate, up)), for the down projection in training: a LoRA branch without
  // dropout keeps gate and up instead of the product, and remakes it in backward
  // (model/lora_branch.h's lora_branch_of_swiglu).
  torch::Tensor forward_swiglu(const torch::Tensor& gate, const torch::Tensor& up);

  std::int64_t in_features() const { return in_features_; }
  std::int64_t out_features() const { return out_features_; }
  torch::Device device() const;

  bool is_quantized() const { return !weight_quantized.is_empty(); }
  Quantization quantization() const { return is_quantized() ? weight_quantized->quantization() : Quantization::kNone; }
  // Sets the base weight from `value` [out, in]: copied into the parameter, or quantized.
  void set_weight(const torch::Tensor& value);
  // The base weight in `dtype`: the parameter's values, or a dequantized temporary copy.
  torch::Tensor dense_weight(c10::ScalarType dtype) const;
  // Replaces the dense weight by its quantized form (frozen), and back: dequantize_weight makes a
  // frozen "weight" parameter in `dtype` from the quantized values (to merge LoRA into them).
  void quantize_weight(Quantization quantize);
  void dequantize_weight(c10::ScalarType dtype);

  // Adds the LoRA branch: fp32 lora_A.weight [r, in] and lora_B.weight [out, r] on the weight's
  // device, both zero (lora.h's apply_lora initializes A). Throws if it already has one.
  void enable_lora(std::int64_t r, double scale, double dropout);
  // Removes the branch (its parameters leave named_parameters()).
  void disable_lora();
  bool has_lora() const { return lora_A != nullptr; }
  std::int64_t lora_rank() const { return has_lora() ? lora_A->out_features() : 0; }
  double lora_scale() const { return lora_scale_; }
  double lora_dropout() const { return lora_dropout_; }

  bool has_bias() const { return bias.defined(); }

  torch::Tensor weight;  // [out, in]; undefined when quantized
  torch::Tensor bias;    // [out]; undefined when the layer has none
  QuantizedWeight weight_quantized{nullptr};
  // The LoRA branch, null when off: plain LinearImpl layers so that their parameter is "weight".
  std::shared_ptr<LinearImpl> lora_A, lora_B;

 private:
  torch::Tensor base_forward(const torch::Tensor& x);  // x W^T (+ b), dequantizing a quantized weight
  // Training with an adapter and no dropout: the branch runs as one autograd function (lora_branch.h).
  bool fused_lora_branch() const { return lora_A && is_training() && lora_dropout_ == 0; }

  std::int64_t in_features_;
  std::int64_t out_features_;
  double lora_scale_ = 0;
  double lora_dropout_ = 0;
};
TORCH_MODULE(Linear);

// Token embedding table, HF name "weight", shape [vocab, hidden].
class EmbeddingImpl : public torch::nn::Module {
 public:
  EmbeddingImpl(std::int64_t vocab_size, std::int64_t dim, const torch::TensorOptions& options);
  torch::Tensor forward(const torch::Tensor& ids);  // ids [B,T] -> [B,T,dim]

  torch::Tensor weight;
};
TORCH_MODULE(Embedding);

}  // namespace ft::model

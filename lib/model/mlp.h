// LLaMA's SwiGLU feed-forward block: down_proj(silu(gate_proj(x)) * up_proj(x)), HF names.
#pragma once

#include <torch/nn/module.h>
#include <torch/nn/pimpl.h>

#include "io/hf_config.h"
#include "model/linear.h"

namespace ft::model {

class MlpImpl : public torch::nn::Module {
 public:
  MlpImpl(const io::LlamaConfig& config, const torch::TensorOptions& options, Quantization quantize = Quantization::kNone);
  torch::Tensor forward(const torch::Tensor& x);

  Linear gate_proj{nullptr}, up_proj{nullptr}, down_proj{nullptr};
};
TORCH_MODULE(Mlp);

}  // namespace ft::model

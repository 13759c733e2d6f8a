// One LLaMA decoder layer (pre-norm): h = x + attn(input_layernorm(x));
// out = h + mlp(post_attention_layernorm(h)). HF names: self_attn, mlp, input_layernorm,
// post_attention_layernorm.
#pragma once

#include <torch/nn/module.h>
#include <torch/nn/pimpl.h>

#include "io/hf_config.h"
#include "model/attention.h"
#include "model/mlp.h"
#include "model/rms_norm.h"

namespace ft::model {

class DecoderLayerImpl : public torch::nn::Module {
 public:
  DecoderLayerImpl(const io::LlamaConfig& config, std::int64_t layer_index, const torch::TensorOptions& options, Quantization quantize = Quantization::kNone);
  torch::Tensor forward(const torch::Tensor& x, const torch::Tensor& cos, const torch::Tensor& sin,
                        const AttentionMask& mask, KvCache* cache);

  Attention self_attn{nullptr};
  Mlp mlp{nullptr};
  RMSNorm input_layernorm{nullptr}, post_attention_layernorm{nullptr};
};
TORCH_MODULE(DecoderLayer);

}  // namespace ft::model

#include "model/decoder_layer.h"

#include <torch/torch.h>

namespace ft::model {

DecoderLayerImpl::DecoderLayerImpl(const io::LlamaConfig& c, std::int64_t layer_index,
                                   const torch::TensorOptions& options, Quantization quantize) {
  self_attn = register_module("self_attn", Attention(c, layer_index, options, quantize));
  mlp = register_module("mlp", Mlp(c, options, quantize));
  input_layernorm = register_module("input_layernorm", RMSNorm(c.hidden_size, c.rms_norm_eps, options));
  post_attention_layernorm =
      register_module("post_attention_layernorm", RMSNorm(c.hidden_size, c.rms_norm_eps, options));
}

torch::Tensor DecoderLayerImpl::forward(const torch::Tensor& x, const torch::Tensor& cos,
                                        const torch::Tensor& sin, const AttentionMask& mask, KvCache* cache) {
  auto h = x + self_attn(input_layernorm(x), cos, sin, mask, cache);
  return h + mlp(post_attention_layernorm(h));
}

}  // namespace ft::model

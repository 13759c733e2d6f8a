// LLaMA self-attention with grouped-query attention (each KV head serves num_heads/num_kv_heads
// consecutive query heads, as HF's repeat_kv), rotary embedding and an additive attention bias
// that encodes causality, padding and packed-sample boundaries. Submodule names are HF's
// (q_proj, k_proj, v_proj, o_proj), so parameters map to checkpoint keys directly.
#pragma once

#include <torch/nn/module.h>
#include <torch/nn/pimpl.h>

#include "io/hf_config.h"
#include "model/linear.h"

namespace ft::model {

class KvCache;

class AttentionImpl : public torch::nn::Module {
 public:
  // `quantize`: how the four projections store their (frozen) weights.
  AttentionImpl(const io::LlamaConfig& config, std::int64_t layer_index, const torch::TensorOptions& options, Quantization quantize = Quantization::kNone);

  // x [B,T,H]; cos/sin [B,T,hd]; bias [B or 1, 1, T, S] fp32 (S = cached + T).
  torch::Tensor forward(const torch::Tensor& x, const torch::Tensor& cos, const torch::Tensor& sin,
                        const torch::Tensor& bias, KvCache* cache);

  Linear q_proj{nullptr}, k_proj{nullptr}, v_proj{nullptr}, o_proj{nullptr};

 private:
  std::int64_t layer_index_;
  std::int64_t num_heads_, num_kv_heads_, head_dim_;
};
TORCH_MODULE(Attention);

// [B, nkv, S, hd] -> [B, nkv * groups, S, hd], each KV head repeated for `groups` query heads.
torch::Tensor repeat_kv(const torch::Tensor& x, std::int64_t groups);

// The additive bias for T queries at cache positions [past, past + T) over S = past + T keys:
// 0 where attention is allowed, the lowest float elsewhere. segment_ids [B,T] (optional, only
// with past == 0) restricts attention to keys of the same segment; a negative segment id marks
// padding, which nothing attends to. Returns [B or 1, 1, T, S] fp32.
torch::Tensor make_attention_bias(std::int64_t num_queries, std::int64_t past,
                                  const torch::Tensor& segment_ids, const torch::Device& device);

}  // namespace ft::model

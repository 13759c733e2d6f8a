// LLaMA self-attention with grouped-query attention (each KV head serves num_heads/num_kv_heads
// consecutive query heads, as HF's repeat_kv), rotary embedding and a mask that encodes
// causality, packed-sample boundaries and a sliding window (mistral; qwen2 with
// use_sliding_window: query position p sees key positions (p - window, p], as transformers'
// sliding_window_overlay). Submodule names are HF's (q_proj, k_proj, v_proj, o_proj), so
// parameters map to checkpoint keys directly; q/k/v (and o) carry a "bias" where config.json says
// (io/hf_config.h).
//
// Two kernels compute softmax(q·kᵀ/√hd + mask)·v:
//   eager: the scores materialized per head (s² per head kept for backward), softmax in fp32:
//          the reference, and the only one LibTorch 1.13 has;
//   sdpa:  at::scaled_dot_product_attention (LibTorch 2.x), which picks a fused kernel when it can
//          (flash or memory-efficient on CUDA, flash on the CPU): the scores never exist whole.
//          Plain causal attention goes without a mask tensor, so CUDA can take flash attention.
#pragma once

#include <torch/nn/module.h>
#include <torch/nn/pimpl.h>

#include <string>

#include "io/hf_config.h"
#include "model/linear.h"

namespace ft::model {

class KvCache;

enum class AttentionKernel { kEager, kSdpa };

// Whether this LibTorch has scaled_dot_product_attention (2.0 and later).
bool sdpa_available();
// model.attention: "auto" (sdpa where available, else eager), "sdpa" or "eager". `what` names the
// key or flag in errors (sdpa on LibTorch 1.13 is one).
AttentionKernel parse_attention_kernel(const std::string& name, const std::string& what);
const char* attention_kernel_name(AttentionKernel kernel);

// What each query may attend to, made once per forward and shared by every layer.
struct AttentionMask {
  AttentionKernel kernel = AttentionKernel::kEager;
  // sdpa without `bias`: true = plain causal over T queries and T keys (no cache, no packing),
  // false = every query sees every key (one new token over a KV cache).
  bool causal = false;
  // [B or 1, 1, T, S], S = cached + T: 0 where attention is allowed, the dtype's lowest elsewhere.
  // fp32 for eager (added to fp32 scores); the compute dtype for sdpa (which requires it).
  torch::Tensor bias;
};

// The mask for T queries at cache positions [past, past + T). segment_ids [B,T] (optional, only
// with past == 0) restricts attention to keys of the same segment (packing); a negative id marks
// padding, which nothing attends to. sliding_window > 0 also hides keys at or before
// position - sliding_window (the same with a KV cache: the cache keeps every key, the mask hides
// the old ones). Eager always gets a bias; sdpa gets one only when causality alone does not
// describe it (segments, several new queries over a cache, or a window shorter than the keys).
AttentionMask make_attention_mask(AttentionKernel kernel, std::int64_t num_queries, std::int64_t past,
                                  const torch::Tensor& segment_ids, c10::ScalarType dtype,
                                  const torch::Device& device, std::int64_t sliding_window = 0);

class AttentionImpl : public torch::nn::Module {
 public:
  // `quantize`: how the four projections store their (frozen) weights.
  AttentionImpl(const io::LlamaConfig& config, std::int64_t layer_index, const torch::TensorOptions& options, Quantization quantize = Quantization::kNone);

  // x [B,T,H]; cos/sin [B,T,hd].
  torch::Tensor forward(const torch::Tensor& x, const torch::Tensor& cos, const torch::Tensor& sin,
                        const AttentionMask& mask, KvCache* cache);

  Linear q_proj{nullptr}, k_proj{nullptr}, v_proj{nullptr}, o_proj{nullptr};

 private:
  std::int64_t layer_index_;
  std::int64_t num_heads_, num_kv_heads_, head_dim_;
};
TORCH_MODULE(Attention);

// [B, nkv, S, hd] -> [B, nkv * groups, S, hd], each KV head repeated for `groups` query heads.
torch::Tensor repeat_kv(const torch::Tensor& x, std::int64_t groups);

// The additive bias for T queries at cache positions [past, past + T) over S = past + T keys:
// 0 where attention is allowed, the lowest value of `dtype` elsewhere (see make_attention_mask).
// Returns [B or 1, 1, T, S].
torch::Tensor make_attention_bias(std::int64_t num_queries, std::int64_t past, const torch::Tensor& segment_ids,
                                  const torch::Device& device, c10::ScalarType dtype = c10::ScalarType::Float,
                                  std::int64_t sliding_window = 0);

}  // namespace ft::model

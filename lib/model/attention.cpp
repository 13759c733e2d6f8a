#include "model/attention.h"

#include <torch/torch.h>

#include <cmath>
#include <limits>

#include "model/kv_cache.h"
#include "model/rotary_embedding.h"
#include "util/error.h"

namespace ft::model {

AttentionImpl::AttentionImpl(const io::LlamaConfig& c, std::int64_t layer_index, const torch::TensorOptions& options,
                             Quantization quantize)
    : layer_index_(layer_index),
      num_heads_(c.num_attention_heads),
      num_kv_heads_(c.num_key_value_heads),
      head_dim_(c.head_dim) {
  q_proj = register_module("q_proj", Linear(c.hidden_size, num_heads_ * head_dim_, options, quantize));
  k_proj = register_module("k_proj", Linear(c.hidden_size, num_kv_heads_ * head_dim_, options, quantize));
  v_proj = register_module("v_proj", Linear(c.hidden_size, num_kv_heads_ * head_dim_, options, quantize));
  o_proj = register_module("o_proj", Linear(num_heads_ * head_dim_, c.hidden_size, options, quantize));
}

torch::Tensor repeat_kv(const torch::Tensor& x, std::int64_t groups) {
  if (groups == 1) return x;
  const auto b = x.size(0), nkv = x.size(1), s = x.size(2), hd = x.size(3);
  return x.unsqueeze(2).expand({b, nkv, groups, s, hd}).reshape({b, nkv * groups, s, hd});
}

torch::Tensor AttentionImpl::forward(const torch::Tensor& x, const torch::Tensor& cos,
                                     const torch::Tensor& sin, const torch::Tensor& bias, KvCache* cache) {
  const auto b = x.size(0), t = x.size(1);
  auto q = q_proj(x).view({b, t, num_heads_, head_dim_}).transpose(1, 2);
  auto k = k_proj(x).view({b, t, num_kv_heads_, head_dim_}).transpose(1, 2);
  auto v = v_proj(x).view({b, t, num_kv_heads_, head_dim_}).transpose(1, 2);
  std::tie(q, k) = apply_rotary(q, k, cos, sin);
  if (cache != nullptr) std::tie(k, v) = cache->update(static_cast<std::size_t>(layer_index_), k, v);
  const std::int64_t groups = num_heads_ / num_kv_heads_;
  k = repeat_kv(k, groups);
  v = repeat_kv(v, groups);

  // Scores in the compute dtype (as HF's eager path), softmax in fp32.
  auto scores = torch::matmul(q, k.transpose(2, 3)) * (1.0 / std::sqrt(static_cast<double>(head_dim_)));
  auto probs = torch::softmax(scores.to(torch::kFloat) + bias, -1).to(q.scalar_type());
  auto out = torch::matmul(probs, v);  // [B,nh,T,hd]
  return o_proj(out.transpose(1, 2).reshape({b, t, num_heads_ * head_dim_}));
}

torch::Tensor make_attention_bias(std::int64_t num_queries, std::int64_t past,
                                  const torch::Tensor& segment_ids, const torch::Device& device) {
  const std::int64_t keys = past + num_queries;
  auto long_opts = torch::TensorOptions().dtype(torch::kLong).device(device);
  auto q_pos = torch::arange(past, keys, long_opts).unsqueeze(1);  // [T,1]
  auto k_pos = torch::arange(0, keys, long_opts).unsqueeze(0);     // [1,S]
  auto allowed = (k_pos <= q_pos).unsqueeze(0);                     // [1,T,S]
  if (segment_ids.defined()) {
    FT_ASSERT(past == 0, "segment ids are only used without a KV cache");
    auto seg = segment_ids.to(device);
    auto same = seg.unsqueeze(2) == seg.unsqueeze(1);               // [B,T,S]
    allowed = allowed.logical_and(same).logical_and((seg >= 0).unsqueeze(1));
  }
  auto zero = torch::zeros({}, torch::TensorOptions().dtype(torch::kFloat).device(device));
  auto lowest = torch::full({}, std::numeric_limits<float>::lowest(), zero.options());
  return torch::where(allowed, zero, lowest).unsqueeze(1);          // [B|1,1,T,S]
}

}  // namespace ft::model

#include "model/attention.h"

#include <torch/torch.h>

#include <cmath>
#include <limits>

#include "model/fused_layer_ops.h"
#include "model/kv_cache.h"
#include "model/rotary_embedding.h"
#include "util/error.h"
#include "util/torch_version.h"

namespace ft::model {

bool sdpa_available() { return FT_TORCH_AT_LEAST(2, 0); }

AttentionKernel parse_attention_kernel(const std::string& name, const std::string& what) {
  if (name == "auto") return sdpa_available() ? AttentionKernel::kSdpa : AttentionKernel::kEager;
  if (name == "eager") return AttentionKernel::kEager;
  FT_CHECK(name == "sdpa", what, ": expected auto, sdpa or eager, got \"", name, "\"");
  FT_CHECK(sdpa_available(), what, ": sdpa needs LibTorch 2.0 or later, this build has ", TORCH_VERSION,
           " (use auto or eager, or build against a LibTorch 2.x: scripts/build.sh --libtorch pip)");
  return AttentionKernel::kSdpa;
}

const char* attention_kernel_name(AttentionKernel kernel) {
  return kernel == AttentionKernel::kSdpa ? "sdpa" : "eager";
}

AttentionImpl::AttentionImpl(const io::LlamaConfig& c, std::int64_t layer_index, const torch::TensorOptions& options,
                             Quantization quantize)
    : layer_index_(layer_index),
      num_heads_(c.num_attention_heads),
      num_kv_heads_(c.num_key_value_heads),
      head_dim_(c.head_dim) {
  q_proj = register_module("q_proj", Linear(c.hidden_size, num_heads_ * head_dim_, options, quantize, c.qkv_bias));
  k_proj = register_module("k_proj", Linear(c.hidden_size, num_kv_heads_ * head_dim_, options, quantize, c.qkv_bias));
  v_proj = register_module("v_proj", Linear(c.hidden_size, num_kv_heads_ * head_dim_, options, quantize, c.qkv_bias));
  o_proj = register_module("o_proj", Linear(num_heads_ * head_dim_, c.hidden_size, options, quantize, c.o_bias));
}

torch::Tensor repeat_kv(const torch::Tensor& x, std::int64_t groups) {
  if (groups == 1) return x;
  const auto b = x.size(0), nkv = x.size(1), s = x.size(2), hd = x.size(3);
  return x.unsqueeze(2).expand({b, nkv, groups, s, hd}).reshape({b, nkv * groups, s, hd});
}

namespace {

// The most negative finite value of `dtype`: masked scores stay finite, so a row that may attend
// to nothing (padding) gives a uniform average instead of NaN.
double lowest_of(c10::ScalarType dtype) {
  switch (dtype) {
    case c10::ScalarType::BFloat16: return static_cast<double>(std::numeric_limits<c10::BFloat16>::lowest());
    case c10::ScalarType::Half: return static_cast<double>(std::numeric_limits<c10::Half>::lowest());
    case c10::ScalarType::Double: return std::numeric_limits<double>::lowest();
    default: return std::numeric_limits<float>::lowest();
  }
}

// Scores in the compute dtype (as HF's eager path), softmax in fp32. `fused` (training): the
// scale, the bias and the softmax as one operation (fused_layer_ops.h).
torch::Tensor eager_attention(const torch::Tensor& q, torch::Tensor k, torch::Tensor v, const torch::Tensor& bias,
                              std::int64_t groups, std::int64_t head_dim, bool fused) {
  k = repeat_kv(k, groups);
  v = repeat_kv(v, groups);
  const double scale = 1.0 / std::sqrt(static_cast<double>(head_dim));
  const torch::Tensor products = torch::matmul(q, k.transpose(2, 3));
  const torch::Tensor probs = fused ? fused_attention_softmax(products, bias, scale)
                                    : torch::softmax((products * scale).to(torch::kFloat) + bias, -1).to(q.scalar_type());
  return torch::matmul(probs, v);  // [B,nh,T,hd]
}

torch::Tensor sdpa_attention(const torch::Tensor& q, torch::Tensor k, torch::Tensor v, const AttentionMask& mask,
                             std::int64_t groups) {
#if FT_TORCH_AT_LEAST(2, 0)
  std::optional<at::Tensor> attn_mask;
  if (mask.bias.defined()) attn_mask = mask.bias;
#if FT_TORCH_AT_LEAST(2, 5)
  // enable_gqa lets the kernel read each KV head for its query heads without copies. CUDA's
  // memory-efficient kernel (the one that takes a mask) does not accept it: with a mask the heads
  // are repeated, so that the fused kernel still applies.
  const bool native_gqa = groups > 1 && !attn_mask.has_value();
#else
  const bool native_gqa = false;
#endif
  if (!native_gqa) {
    k = repeat_kv(k, groups);
    v = repeat_kv(v, groups);
  }
#if FT_TORCH_AT_LEAST(2, 5)
  return at::scaled_dot_product_attention(q, k, v, attn_mask, 0.0, mask.causal, {}, native_gqa);
#else
  return at::scaled_dot_product_attention(q, k, v, attn_mask, 0.0, mask.causal);
#endif
#else
  FT_ASSERT(false, "the sdpa attention kernel needs LibTorch 2.0 (parse_attention_kernel refuses it)");
  return {};
#endif
}

}  // namespace

torch::Tensor AttentionImpl::forward(const torch::Tensor& x, const torch::Tensor& cos, const torch::Tensor& sin,
                                     const AttentionMask& mask, KvCache* cache) {
  const auto b = x.size(0), t = x.size(1);
  torch::Tensor q = q_proj(x).view({b, t, num_heads_, head_dim_});
  torch::Tensor k = k_proj(x).view({b, t, num_kv_heads_, head_dim_});
  auto v = v_proj(x).view({b, t, num_kv_heads_, head_dim_}).transpose(1, 2);
  if (is_training()) {  // rotated before the heads are transposed, in one pass (fused_layer_ops.h)
    q = fused_rotary(q, cos, sin).transpose(1, 2);
    k = fused_rotary(k, cos, sin).transpose(1, 2);
  } else {
    std::tie(q, k) = apply_rotary(q.transpose(1, 2), k.transpose(1, 2), cos, sin);
  }
  if (cache != nullptr) std::tie(k, v) = cache->update(static_cast<std::size_t>(layer_index_), k, v);
  const std::int64_t groups = num_heads_ / num_kv_heads_;
  const torch::Tensor out = mask.kernel == AttentionKernel::kSdpa ? sdpa_attention(q, k, v, mask, groups)
                                                                  : eager_attention(q, k, v, mask.bias, groups, head_dim_, is_training());
  return o_proj(out.transpose(1, 2).reshape({b, t, num_heads_ * head_dim_}));
}

torch::Tensor make_attention_bias(std::int64_t num_queries, std::int64_t past, const torch::Tensor& segment_ids,
                                  const torch::Device& device, c10::ScalarType dtype, std::int64_t sliding_window) {
  const std::int64_t keys = past + num_queries;
  auto long_opts = torch::TensorOptions().dtype(torch::kLong).device(device);
  auto q_pos = torch::arange(past, keys, long_opts).unsqueeze(1);  // [T,1]
  auto k_pos = torch::arange(0, keys, long_opts).unsqueeze(0);     // [1,S]
  auto allowed = k_pos <= q_pos;                                    // [T,S]
  if (sliding_window > 0) allowed = allowed.logical_and(k_pos > q_pos - sliding_window);
  allowed = allowed.unsqueeze(0);                                   // [1,T,S]
  if (segment_ids.defined()) {
    FT_ASSERT(past == 0, "segment ids are only used without a KV cache");
    auto seg = segment_ids.to(device);
    auto same = seg.unsqueeze(2) == seg.unsqueeze(1);               // [B,T,S]
    allowed = allowed.logical_and(same).logical_and((seg >= 0).unsqueeze(1));
  }
  auto zero = torch::zeros({}, torch::TensorOptions().dtype(dtype).device(device));
  auto lowest = torch::full({}, lowest_of(dtype), zero.options());
  return torch::where(allowed, zero, lowest).unsqueeze(1);          // [B|1,1,T,S]
}

AttentionMask make_attention_mask(AttentionKernel kernel, std::int64_t num_queries, std::int64_t past,
                                  const torch::Tensor& segment_ids, c10::ScalarType dtype,
                                  const torch::Device& device, std::int64_t sliding_window) {
  AttentionMask mask;
  mask.kernel = kernel;
  // A window that every query's keys fit in hides nothing.
  if (sliding_window >= past + num_queries) sliding_window = 0;
  if (kernel == AttentionKernel::kSdpa && !segment_ids.defined() && sliding_window == 0 &&
      (past == 0 || num_queries == 1)) {
    mask.causal = past == 0 && num_queries > 1;
    return mask;
  }
  mask.bias = make_attention_bias(num_queries, past, segment_ids, device,
                                  kernel == AttentionKernel::kSdpa ? dtype : c10::ScalarType::Float, sliding_window);
  return mask;
}

}  // namespace ft::model

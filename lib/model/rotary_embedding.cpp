#include "model/rotary_embedding.h"

#include <torch/torch.h>

#include <cmath>

namespace ft::model {
namespace {

// HF transformers modeling_rope_utils._compute_llama3_parameters.
torch::Tensor llama3_scaled(const torch::Tensor& inv_freq, const io::RopeScaling& s) {
  const double old_context = static_cast<double>(s.original_max_position_embeddings);
  const double low_freq_wavelen = old_context / s.low_freq_factor;
  const double high_freq_wavelen = old_context / s.high_freq_factor;
  auto wavelen = 2 * M_PI / inv_freq;
  auto scaled = torch::where(wavelen > low_freq_wavelen, inv_freq / s.factor, inv_freq);
  auto smooth = (old_context / wavelen - s.low_freq_factor) / (s.high_freq_factor - s.low_freq_factor);
  auto smoothed = (1 - smooth) * scaled / s.factor + smooth * scaled;
  auto is_medium = (wavelen >= high_freq_wavelen).logical_and(wavelen <= low_freq_wavelen);
  return torch::where(is_medium, smoothed, scaled);
}

}  // namespace

RotaryEmbedding::RotaryEmbedding(const io::LlamaConfig& config) {
  const std::int64_t dim = config.head_dim;
  // Same float32 arithmetic as HF: 1 / theta^(arange(0, dim, 2).float() / dim).
  auto exponent = torch::arange(0, dim, 2, torch::kLong).to(torch::kFloat) / static_cast<double>(dim);
  inv_freq_ = 1.0 / torch::pow(config.rope_theta, exponent);
  if (config.rope_scaling.type == "linear") inv_freq_ = inv_freq_ / config.rope_scaling.factor;
  if (config.rope_scaling.type == "llama3") inv_freq_ = llama3_scaled(inv_freq_, config.rope_scaling);
}

std::pair<at::Tensor, at::Tensor> RotaryEmbedding::cos_sin(const at::Tensor& position_ids,
                                                           c10::ScalarType dtype) const {
  auto inv_freq = inv_freq_.to(position_ids.device());
  auto freqs = position_ids.to(torch::kFloat).unsqueeze(-1) * inv_freq;  // [B,T,hd/2]
  auto emb = torch::cat({freqs, freqs}, -1);                              // [B,T,hd]
  return {emb.cos().to(dtype), emb.sin().to(dtype)};
}

at::Tensor rotate_half(const at::Tensor& x) {
  const std::int64_t half = x.size(-1) / 2;
  auto x1 = x.narrow(-1, 0, half);
  auto x2 = x.narrow(-1, half, half);
  return torch::cat({-x2, x1}, -1);
}

std::pair<at::Tensor, at::Tensor> apply_rotary(const at::Tensor& q, const at::Tensor& k,
                                               const at::Tensor& cos, const at::Tensor& sin) {
  auto c = cos.unsqueeze(1);  // broadcast over heads
  auto s = sin.unsqueeze(1);
  return {q * c + rotate_half(q) * s, k * c + rotate_half(k) * s};
}

}  // namespace ft::model

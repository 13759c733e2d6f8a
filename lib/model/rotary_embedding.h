// Rotary position embedding in HF's convention (rotate_half: dim i pairs with i + head_dim/2,
// inv_freq = theta^(-2i/head_dim), cos/sin = cat(freqs, freqs)), with HF's "linear" and
// "llama3" frequency scaling. cos/sin are computed once per forward from explicit position ids,
// so packed sequences can restart positions at every sample.
#pragma once

#include <ATen/core/Tensor.h>

#include <utility>

#include "io/hf_config.h"

namespace ft::model {

class RotaryEmbedding {
 public:
  explicit RotaryEmbedding(const io::LlamaConfig& config);

  // position_ids [B,T] (int64) -> cos, sin [B,T,head_dim], computed in fp32, returned in `dtype`.
  std::pair<at::Tensor, at::Tensor> cos_sin(const at::Tensor& position_ids, c10::ScalarType dtype) const;
  const at::Tensor& inv_freq() const { return inv_freq_; }  // [head_dim/2], fp32, CPU

 private:
  at::Tensor inv_freq_;
};

// x [..., head_dim] -> cat(-x2, x1)
at::Tensor rotate_half(const at::Tensor& x);
// q [B,nh,T,hd], k [B,nkv,T,hd]; cos/sin [B,T,hd]. Returns the rotated (q, k).
std::pair<at::Tensor, at::Tensor> apply_rotary(const at::Tensor& q, const at::Tensor& k,
                                               const at::Tensor& cos, const at::Tensor& sin);

}  // namespace ft::model

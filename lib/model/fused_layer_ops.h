// The element-wise chains of a LLaMA layer as single autograd operations, for training: each
// saves less for backward than the chain of ATen operations it replaces (RMSNorm: the input and
// one fp32 scale per row; SwiGLU: its two inputs; rotary: nothing but cos/sin; the attention's
// softmax: its output, which the product with v keeps anyway) and computes its
// backward by formula. On the CPU in fp32 forward and backward are one raw loop each
// (model/fused_cpu_loops.h); other devices and dtypes run the same ATen operations as the unfused
// path in forward and the formula in backward.
//
// The modules use them in training mode only: evaluation and generation keep Hugging Face's exact
// operation order (ft's logits equal transformers' bit for bit with eager attention). Fused and
// unfused agree to fp32 rounding (tests/model/fused_layer_ops_test.cpp: forward and backward).
#pragma once

#include <ATen/core/Tensor.h>

namespace ft::model {

// weight * (x * rsqrt(mean(x², -1) + eps)), the normalization in fp32 (as RMSNormImpl).
at::Tensor fused_rms_norm(const at::Tensor& x, const at::Tensor& weight, double eps);

// silu(gate) * up (gate and up of the same shape).
at::Tensor fused_swiglu(const at::Tensor& gate, const at::Tensor& up);
// The values fused_swiglu returns, bit for bit, without autograd: a LoRA branch on the down
// projection recomputes its input with it in backward (model/lora_branch.h).
at::Tensor swiglu_values(const at::Tensor& gate, const at::Tensor& up);

// x [B,T,H,hd] (the projection's output before the heads are transposed; the last dimension
// contiguous), cos/sin [B or 1,T,hd]: x * cos + rotate_half(x) * sin, broadcast over the heads.
at::Tensor fused_rotary(const at::Tensor& x, const at::Tensor& cos, const at::Tensor& sin);

// Eager attention's weights: softmax(scores * scale + bias, -1) in fp32, returned in scores'
// dtype. scores [B,H,T,S] (q·kᵀ, not yet scaled), bias fp32 [B or 1,1,T,S] (make_attention_bias).
// One pass forward and one backward instead of the scale, the bias, the softmax and their
// backwards, each over the [B,H,T,S] scores.
at::Tensor fused_attention_softmax(const at::Tensor& scores, const at::Tensor& bias, double scale);

}  // namespace ft::model

// The LoRA branch of a training forward as one autograd function: y + scale · (x A^T) B^T, in
// fp32 (PEFT's order: the input cast to the adapter's dtype, the sum cast back once), that keeps
// for backward the input as it came (the compute dtype: bf16, shared by the branches of q, k and
// v, or of gate and up, which read the same tensor) instead of its fp32 copy, and converts it
// again in backward: the conversion to fp32 is exact, so nothing changes but memory. Under bf16
// LoRA on all linear layers of Llama-3.1-8B that is 53 KB per token and layer instead of 155, and
// 25 KB with down_proj's branch remaking its input (lora_branch_of_swiglu below).
// Without dropout only; the dropout path keeps its dropped fp32 copy (linear.cpp).
#pragma once

#include <torch/torch.h>

namespace ft::model {

// y: the frozen projection's output for x ([..., out]); a: [r, in] and b: [out, r] in fp32.
// Returns [..., out] in x's dtype.
torch::Tensor lora_branch(const torch::Tensor& x, const torch::Tensor& y, const torch::Tensor& a,
                          const torch::Tensor& b, double scale);

// The same branch for the down projection, whose input x is fused_swiglu(gate, up): it keeps gate
// and up, which SwiGLU's backward keeps anyway, and makes x again from them in backward
// (swiglu_values, the same bits) instead of keeping it: tokens x intermediate elements less per
// layer (Llama-3.1-8B in bf16: 28 KB per token and layer).
torch::Tensor lora_branch_of_swiglu(const torch::Tensor& x, const torch::Tensor& gate, const torch::Tensor& up,
                                    const torch::Tensor& y, const torch::Tensor& a, const torch::Tensor& b,
                                    double scale);

}  // namespace ft::model

// The raw fp32 CPU loops behind the fused layer operations (model/fused_layer_ops.h): RMSNorm,
// SwiGLU, the rotary embedding and the attention's softmax, forward and backward, and the
// cross-entropy's log-sum-exp over a row of logits, each one pass over its rows where the
// unfused ATen chain makes several. Callers split rows across threads (at::parallel_for); these
// run one range on one thread. No LibTorch here, so the file is built without the shared PCH and
// with -fno-math-errno (the loops vectorize; see lib/CMakeLists.txt).
#pragma once

#include <cstdint>

namespace ft::model::cpu {

// y = w * (x * rstd) per row of n, rstd = 1 / sqrt(mean(x²) + eps) (written to rstd[row]).
void rms_norm_forward(const float* x, const float* w, float* y, float* rstd, std::int64_t rows, std::int64_t n,
                      float eps);
// dx for `rows` rows; dw_partial (n floats) gets the rows' dy * x * rstd added. dx may be null.
void rms_norm_backward(const float* dy, const float* x, const float* w, const float* rstd, float* dx,
                       float* dw_partial, std::int64_t rows, std::int64_t n);

// y = silu(g) * u over n elements.
void swiglu_forward(const float* g, const float* u, float* y, std::int64_t n);
// dg = dy * u * silu'(g), du = dy * silu(g).
void swiglu_backward(const float* dy, const float* g, const float* u, float* dg, float* du, std::int64_t n);

// One head's row of hd (even) elements: out = x * cos + rotate_half(x) * sin, rotate_half(x) =
// cat(-x2, x1). With inverse, the transpose (the backward: rotation by -angle).
void rotary_row(const float* x, const float* cos, const float* sin, float* out, std::int64_t hd, bool inverse);

// One row of n attention scores: p = softmax(s * scale + bias), the sum of the exponentials in
// double, p normalized by one reciprocal as ATen's softmax. A row with a NaN or +inf is all NaN,
// as ATen's.
void attention_softmax_row(const float* s, const float* bias, float* p, std::int64_t n, float scale);
// Its backward: ds = (p * (dp - Σ dp·p)) * scale.
void attention_softmax_backward_row(const float* p, const float* dp, float* ds, std::int64_t n, float scale);

// One row of n logits: returns log(Σ exp(x)) (as max + log(Σ exp(x - max)), the sum in double);
// with `gradient`, x becomes softmax(x) - one_hot(target) in place (the gradient of the row's
// loss with respect to its logits). Without, x is only read. A NaN or +inf logit makes NaN of
// both, as ATen's operations do.
float log_sum_exp_row(float* x, std::int64_t n, std::int64_t target, bool gradient);

}  // namespace ft::model::cpu

// The raw-pointer CPU loops behind ft::optim: the fused AdamW update, a sum of squares and the
// unscale-and-check of loss scaling, over contiguous fp32 ranges. Callers split the work across
// threads (at::parallel_for); these run one range on one thread. No LibTorch here, so that
// cpu_kernels.cpp can be built without the shared PCH and with -fno-math-errno (see below).
#pragma once

#include <cstdint>

namespace ft::optim::cpu {

// The per-step scalars of torch.optim.AdamW's single-tensor path, rounded to fp32 exactly where
// PyTorch's CPU kernels round them (a Python float passed as a Scalar becomes a float).
struct AdamWCoefficients {
  float beta1 = 0, one_minus_beta1 = 0;  // exp_avg.mul_(beta1).add_(grad, alpha=1-beta1)
  float beta2 = 0, one_minus_beta2 = 0;  // exp_avg_sq.mul_(beta2).addcmul_(grad, grad, 1-beta2)
  float bias_correction2_sqrt = 0;       // sqrt(1 - beta2^step)
  float eps = 0;
  float neg_step_size = 0;               // -lr / (1 - beta1^step)
  float decay_factor = 1;                // 1 - lr * weight_decay (for ranges that decay)
};

// `step` is the 1-based count after this update, as PyTorch's state['step'] once incremented.
// The double arithmetic is Python's (pow, sqrt, then one rounding to float per coefficient).
AdamWCoefficients adamw_coefficients(double lr, double beta1, double beta2, double eps,
                                     double weight_decay, std::int64_t step);

// One AdamW update of n elements in place. decay_factor is c.decay_factor for ranges with weight
// decay and 1 for the others (multiplying by 1 is exact, as PyTorch's mul_(1 - lr*0) is).
// Per element, with every operation rounded to fp32 as PyTorch's AVX2/AVX-512 kernels do:
//   m = fma(g, 1-b1, m*b1)            add_(alpha=) is Vectorized::fmadd
//   v = fma((1-b2)*g, g, v*b2)        addcmul_'s self + value*t1*t2, contracted by the compiler
//   p = p*decay + (-step_size*m) / (sqrt(v)/bc2_sqrt + eps)
// so the result is bitwise torch.optim.AdamW's on such CPUs (tests/optim/adamw_test.cpp).
void adamw_update(float* param, const float* grad, float* exp_avg, float* exp_avg_sq, std::int64_t n,
                  const AdamWCoefficients& c, float decay_factor);

// Sum of x[i]^2 accumulated in double, in a fixed order (8 interleaved partial sums), so the
// result depends only on the data and n, never on the instruction set chosen at run time.
double sum_of_squares(const float* x, std::int64_t n);

// x[i] *= inv_scale in place; returns true if any x[i] was Inf or NaN before scaling (GradScaler's
// _amp_foreach_non_finite_check_and_unscale_).
bool unscale_and_check(float* x, std::int64_t n, float inv_scale);

}  // namespace ft::optim::cpu

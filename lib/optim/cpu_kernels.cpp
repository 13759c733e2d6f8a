// The raw fp32 loops of ft::optim, written for the auto-vectorizer. Built without the PCH and
// with -fno-math-errno (else GCC keeps a scalar sqrtf call per element for errno and refuses to
// vectorize) and -ffp-contract=off (else GCC fuses p*decay + update into one FMA, which PyTorch
// does not): see lib/CMakeLists.txt. The only FMAs are the two written as std::fma.
// On x86-64 each loop is cloned for AVX-512, AVX2+FMA and the baseline, chosen at load time
// (util/cpu_clones.h); all clones give the same bits (the baseline one calls libm's fmaf, slowly).
#include "optim/cpu_kernels.h"

#include <cfloat>
#include <cmath>

#include "util/cpu_clones.h"

namespace ft::optim::cpu {

AdamWCoefficients adamw_coefficients(double lr, double beta1, double beta2, double eps,
                                     double weight_decay, std::int64_t step) {
  // torch/optim/adamw.py, _single_tensor_adamw (capturable=False), in Python's double arithmetic.
  const double s = static_cast<double>(step);
  const double bias_correction1 = 1.0 - std::pow(beta1, s);
  const double bias_correction2 = 1.0 - std::pow(beta2, s);
  const double step_size = lr / bias_correction1;
  AdamWCoefficients c;
  c.beta1 = static_cast<float>(beta1);
  c.one_minus_beta1 = static_cast<float>(1.0 - beta1);
  c.beta2 = static_cast<float>(beta2);
  c.one_minus_beta2 = static_cast<float>(1.0 - beta2);
  c.bias_correction2_sqrt = static_cast<float>(std::sqrt(bias_correction2));
  c.eps = static_cast<float>(eps);
  c.neg_step_size = static_cast<float>(-step_size);
  c.decay_factor = static_cast<float>(1.0 - lr * weight_decay);
  return c;
}

FT_CPU_CLONES
void adamw_update(float* __restrict param, const float* __restrict grad, float* __restrict exp_avg,
                  float* __restrict exp_avg_sq, std::int64_t n, const AdamWCoefficients& c,
                  float decay_factor) {
  // Copies in locals: the compiler cannot otherwise prove `c` is not written through the arrays.
  const float beta1 = c.beta1, one_minus_beta1 = c.one_minus_beta1;
  const float beta2 = c.beta2, one_minus_beta2 = c.one_minus_beta2;
  const float bc2_sqrt = c.bias_correction2_sqrt, eps = c.eps, neg_step_size = c.neg_step_size;
  for (std::int64_t i = 0; i < n; ++i) {
    const float g = grad[i];
    const float m = std::fma(g, one_minus_beta1, exp_avg[i] * beta1);
    const float v = std::fma(one_minus_beta2 * g, g, exp_avg_sq[i] * beta2);
    const float denom = std::sqrt(v) / bc2_sqrt + eps;
    param[i] = param[i] * decay_factor + (neg_step_size * m) / denom;
    exp_avg[i] = m;
    exp_avg_sq[i] = v;
  }
}

FT_CPU_CLONES
double sum_of_squares(const float* __restrict x, std::int64_t n) {
  constexpr int kLanes = 8;
  double acc[kLanes] = {0, 0, 0, 0, 0, 0, 0, 0};
  std::int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes) {
    for (int j = 0; j < kLanes; ++j) {
      const double v = x[i + j];
      acc[j] += v * v;
    }
  }
  for (int j = 0; i < n; ++i, ++j) {
    const double v = x[i];
    acc[j] += v * v;
  }
  return ((acc[0] + acc[1]) + (acc[2] + acc[3])) + ((acc[4] + acc[5]) + (acc[6] + acc[7]));
}

FT_CPU_CLONES
bool unscale_and_check(float* __restrict x, std::int64_t n, float inv_scale) {
  int nonfinite = 0;
  for (std::int64_t i = 0; i < n; ++i) {
    const float v = x[i];
    nonfinite |= !(std::fabs(v) <= FLT_MAX);  // false for Inf and NaN
    x[i] = v * inv_scale;
  }
  return nonfinite != 0;
}

}  // namespace ft::optim::cpu

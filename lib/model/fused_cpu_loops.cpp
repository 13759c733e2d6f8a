// The raw fp32 loops of the fused layer operations, written for the auto-vectorizer (as
// optim/cpu_kernels.cpp: built without the PCH, with -fno-math-errno; on x86-64 each loop is
// cloned for AVX-512, AVX2 and the baseline, chosen at load time: util/cpu_clones.h).
#include "model/fused_cpu_loops.h"

#include <cmath>
#include <cstring>
#include <limits>

#include "util/cpu_clones.h"

namespace ft::model::cpu {
namespace {

// exp(x) in fp32 within about 1 ulp (Cephes' expf: x = n·ln2 + r, a degree-6 polynomial in r,
// 2^n built in the exponent bits), written so that a loop calling it vectorizes, as LibTorch's
// own vectorized exp (Sleef, 1 ulp) does; libm's expf would keep the loop scalar. Inputs are
// clamped to [-87, 88], where exp stays a normal float (silu only needs exp(-g) for 1 + exp(-g)).
inline float vector_exp(float x) {
  x = std::fmin(std::fmax(x, -87.0f), 88.0f);
  const float n = std::floor(x * 1.44269504088896341f + 0.5f);
  float r = x - n * 0.693359375f;
  r = r - n * -2.12194440e-4f;
  float p = 1.9875691500e-4f;
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  p = p * (r * r) + r + 1.0f;
  const std::int32_t bits = (static_cast<std::int32_t>(n) + 127) << 23;
  float scale;
  std::memcpy(&scale, &bits, sizeof scale);
  return p * scale;
}

// Σ a[i]·b[i] in 8 double lanes (a fixed order: the result does not depend on the machine).
FT_CPU_CLONES
double dot(const float* __restrict a, const float* __restrict b, std::int64_t n) {
  constexpr int kLanes = 8;
  double acc[kLanes] = {0, 0, 0, 0, 0, 0, 0, 0};
  std::int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes)
    for (int j = 0; j < kLanes; ++j) acc[j] += static_cast<double>(a[i + j]) * static_cast<double>(b[i + j]);
  for (int j = 0; i < n; ++i, ++j) acc[j] += static_cast<double>(a[i]) * static_cast<double>(b[i]);
  return ((acc[0] + acc[1]) + (acc[2] + acc[3])) + ((acc[4] + acc[5]) + (acc[6] + acc[7]));
}

// A probability below the smallest normal float as 0: the products that take these rows run
// tens of times slower over denormals, and ATen's exp makes them for exponents below -87.
inline float flush_denormal(float p) { return p < std::numeric_limits<float>::min() ? 0.0f : p; }

// max(m, x), NaN when either is (as ATen's amax).
inline float nan_max(float m, float x) { return (x > m || x != x) ? x : m; }

// The largest of a[0..n) in 16 lanes, so that the loop vectorizes (a maximum does not depend on
// the order); NaN when any element is.
FT_CPU_CLONES
float max_of(const float* __restrict a, std::int64_t n) {
  constexpr int kLanes = 16;
  float lane_max[kLanes];
  for (float& m : lane_max) m = -std::numeric_limits<float>::infinity();
  std::int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes)
    for (int j = 0; j < kLanes; ++j) lane_max[j] = nan_max(lane_max[j], a[i + j]);
  for (int j = 0; i < n; ++i, ++j) lane_max[j] = nan_max(lane_max[j], a[i]);
  float m = lane_max[0];
  for (int j = 1; j < kLanes; ++j) m = nan_max(m, lane_max[j]);
  return m;
}

// A row whose maximum is NaN or +inf: ATen's softmax and log-softmax make it all NaN (exp of
// NaN or of inf - inf), where vector_exp would clamp those to finite values and hide them.
void fill_nan(float* p, std::int64_t n) {
  for (std::int64_t i = 0; i < n; ++i) p[i] = std::numeric_limits<float>::quiet_NaN();
}

// Σ a[i] in 8 double lanes (a fixed order, as dot).
FT_CPU_CLONES
double sum(const float* __restrict a, std::int64_t n) {
  constexpr int kLanes = 8;
  double acc[kLanes] = {0, 0, 0, 0, 0, 0, 0, 0};
  std::int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes)
    for (int j = 0; j < kLanes; ++j) acc[j] += static_cast<double>(a[i + j]);
  for (int j = 0; i < n; ++i, ++j) acc[j] += static_cast<double>(a[i]);
  return ((acc[0] + acc[1]) + (acc[2] + acc[3])) + ((acc[4] + acc[5]) + (acc[6] + acc[7]));
}

}  // namespace

FT_CPU_CLONES
void rms_norm_forward(const float* __restrict x, const float* __restrict w, float* __restrict y,
                      float* __restrict rstd, std::int64_t rows, std::int64_t n, float eps) {
  for (std::int64_t row = 0; row < rows; ++row) {
    const float* xr = x + row * n;
    float* yr = y + row * n;
    // HF: variance = mean(x²) in fp32, then x * rsqrt(variance + eps), then weight * that.
    const float variance = static_cast<float>(dot(xr, xr, n) / static_cast<double>(n));
    const float r = 1.0f / std::sqrt(variance + eps);
    rstd[row] = r;
    for (std::int64_t i = 0; i < n; ++i) yr[i] = w[i] * (xr[i] * r);
  }
}

FT_CPU_CLONES
void rms_norm_backward(const float* __restrict dy, const float* __restrict x, const float* __restrict w,
                       const float* __restrict rstd, float* __restrict dx, float* __restrict dw_partial,
                       std::int64_t rows, std::int64_t n) {
  for (std::int64_t row = 0; row < rows; ++row) {
    const float* dyr = dy + row * n;
    const float* xr = x + row * n;
    const float r = rstd[row];
    if (dw_partial != nullptr)
      for (std::int64_t i = 0; i < n; ++i) dw_partial[i] += dyr[i] * (xr[i] * r);
    if (dx == nullptr) continue;
    // dx = r · (dy·w - x̂ · mean(dy·w · x̂)), x̂ = x·r: Σ dy·w·x̂ = r · Σ dy·w·x.
    double s = 0;
    for (std::int64_t i = 0; i < n; ++i) s += static_cast<double>(dyr[i] * w[i]) * xr[i];
    const float c = static_cast<float>(s * r * r / static_cast<double>(n));
    float* dxr = dx + row * n;
    for (std::int64_t i = 0; i < n; ++i) dxr[i] = r * (dyr[i] * w[i] - xr[i] * c);
  }
}

FT_CPU_CLONES
void swiglu_forward(const float* __restrict g, const float* __restrict u, float* __restrict y, std::int64_t n) {
  // ATen's silu: x / (1 + exp(-x)).
  for (std::int64_t i = 0; i < n; ++i) y[i] = g[i] / (1.0f + vector_exp(-g[i])) * u[i];
}

FT_CPU_CLONES
void swiglu_backward(const float* __restrict dy, const float* __restrict g, const float* __restrict u,
                     float* __restrict dg, float* __restrict du, std::int64_t n) {
  for (std::int64_t i = 0; i < n; ++i) {
    const float x = g[i];
    const float sigmoid = 1.0f / (1.0f + vector_exp(-x));
    du[i] = dy[i] * (x / (1.0f + vector_exp(-x)));
    // ATen's silu_backward: grad · sigmoid · (1 + x · (1 - sigmoid)), grad = dy · u.
    dg[i] = (dy[i] * u[i]) * sigmoid * (1.0f + x * (1.0f - sigmoid));
  }
}

FT_CPU_CLONES
void rotary_row(const float* __restrict x, const float* __restrict cos, const float* __restrict sin,
                float* __restrict out, std::int64_t hd, bool inverse) {
  const std::int64_t half = hd / 2;
  // forward: out_i = x_i c_i - x_{i+h} s_i (i < h), x_i c_i + x_{i-h} s_i (i >= h);
  // inverse (its transpose): out_i = x_i c_i + x_{i+h} s_{i+h} (i < h), x_i c_i - x_{i-h} s_{i-h}.
  if (!inverse) {
    for (std::int64_t i = 0; i < half; ++i) out[i] = x[i] * cos[i] + (-x[i + half]) * sin[i];
    for (std::int64_t i = half; i < hd; ++i) out[i] = x[i] * cos[i] + x[i - half] * sin[i];
  } else {
    for (std::int64_t i = 0; i < half; ++i) out[i] = x[i] * cos[i] + x[i + half] * sin[i + half];
    for (std::int64_t i = half; i < hd; ++i) out[i] = x[i] * cos[i] - x[i - half] * sin[i - half];
  }
}

FT_CPU_CLONES
void attention_softmax_row(const float* __restrict s, const float* __restrict bias, float* __restrict p,
                           std::int64_t n, float scale) {
  // As the unfused chain: scores * scale, + bias (two roundings: no FMA contraction here), then
  // softmax's max, exp(x - max), sum and multiplication by 1 / sum.
  for (std::int64_t i = 0; i < n; ++i) p[i] = s[i] * scale + bias[i];
  const float row_max = max_of(p, n);
  if (!std::isfinite(row_max)) return fill_nan(p, n);
  for (std::int64_t i = 0; i < n; ++i) {
    const float x = p[i] - row_max;
    const float e = vector_exp(x);
    p[i] = x < -87.0f ? 0.0f : e;
  }
  const float inverse = static_cast<float>(1.0 / sum(p, n));
  for (std::int64_t i = 0; i < n; ++i) p[i] = flush_denormal(p[i] * inverse);
}

FT_CPU_CLONES
void attention_softmax_backward_row(const float* __restrict p, const float* __restrict dp, float* __restrict ds,
                                    std::int64_t n, float scale) {
  const float d = static_cast<float>(dot(p, dp, n));
  for (std::int64_t i = 0; i < n; ++i) ds[i] = (p[i] * (dp[i] - d)) * scale;
}

FT_CPU_CLONES
float log_sum_exp_row(float* __restrict x, std::int64_t n, std::int64_t target, bool gradient) {
  // As the unfused chain (amax, sub_, exp_, sum, log, + max; then * (1 / sum), - 1 at the
  // target), in three passes over the row instead of eight. (Computing exp again in the last
  // pass instead of storing it in the second is slower: 63 against 50 ms a step on the 100M bench.)
  const float row_max = max_of(x, n);
  if (!std::isfinite(row_max)) {
    if (gradient) fill_nan(x, n);
    return std::numeric_limits<float>::quiet_NaN();
  }
  constexpr int kLanes = 16;  // 16 floats: one AVX-512 register of exponentials
  double acc[kLanes] = {};
  std::int64_t i = 0;
  if (gradient) {
    for (; i + kLanes <= n; i += kLanes)
      for (int j = 0; j < kLanes; ++j) {
        const float e = vector_exp(x[i + j] - row_max);
        x[i + j] = e;
        acc[j] += static_cast<double>(e);
      }
    for (int j = 0; i < n; ++i, ++j) {
      const float e = vector_exp(x[i] - row_max);
      x[i] = e;
      acc[j] += static_cast<double>(e);
    }
  } else {
    for (; i + kLanes <= n; i += kLanes)
      for (int j = 0; j < kLanes; ++j) acc[j] += static_cast<double>(vector_exp(x[i + j] - row_max));
    for (int j = 0; i < n; ++i, ++j) acc[j] += static_cast<double>(vector_exp(x[i] - row_max));
  }
  double total = 0;
  for (int j = 0; j < kLanes; ++j) total += acc[j];
  const float sum_exp = static_cast<float>(total);
  if (gradient) {
    const float inverse = 1.0f / sum_exp;
    for (i = 0; i < n; ++i) x[i] = flush_denormal(x[i] * inverse);
    x[target] -= 1.0f;
  }
  return std::log(sum_exp) + row_max;
}

}  // namespace ft::model::cpu

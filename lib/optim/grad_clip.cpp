// Gradient norm and clipping. The CPU fp32 sum of squares runs cpu::sum_of_squares over fixed
// blocks in parallel and adds the block sums in order, so it is thread-count independent; other
// dtypes and devices use LibTorch reductions. Scaling rounds coef to fp32 as PyTorch's mul_ does.
#include "optim/grad_clip.h"

#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <ATen/core/grad_mode.h>

#include <cmath>
#include <vector>

#include "optim/cpu_kernels.h"
#include "util/error.h"

namespace ft::optim {
namespace {

constexpr std::int64_t kBlock = 1 << 16;  // elements per partial sum (fixed: determinism)

double cpu_fp32_sum_of_squares(const at::Tensor& t) {
  const at::Tensor c = t.contiguous();
  const float* x = c.data_ptr<float>();
  const std::int64_t n = c.numel();
  const std::int64_t blocks = (n + kBlock - 1) / kBlock;
  std::vector<double> partial(static_cast<std::size_t>(blocks), 0.0);
  at::parallel_for(0, blocks, 1, [&](std::int64_t begin, std::int64_t end) {
    for (std::int64_t b = begin; b < end; ++b) {
      const std::int64_t lo = b * kBlock;
      partial[b] = cpu::sum_of_squares(x + lo, std::min(kBlock, n - lo));
    }
  });
  double sum = 0;
  for (double p : partial) sum += p;
  return sum;
}

}  // namespace

at::Tensor local_sum_of_squares(at::TensorList tensors) {
  at::NoGradGuard no_grad;
  double cpu_sum = 0;
  std::vector<at::Tensor> device_norms;  // fp32 norms of non-CPU tensors, left on their device
  for (const at::Tensor& t : tensors) {
    if (!t.defined() || t.numel() == 0) continue;
    FT_CHECK(at::isFloatingType(t.scalar_type()), "gradient norm: expected floating-point gradients, got ",
             t.dtype());
    if (t.device().is_cpu()) {
      cpu_sum += cpu_fp32_sum_of_squares(t.scalar_type() == at::kFloat ? t : t.to(at::kFloat));
    } else {
      device_norms.push_back(at::linalg_vector_norm(t.detach(), 2, c10::nullopt, false, at::kFloat));
    }
  }
  if (!device_norms.empty()) {
    // One transfer for all of them: the squares are summed in double on the device.
    cpu_sum += at::stack(device_norms).to(at::kDouble).pow(2).sum().item<double>();
  }
  return at::scalar_tensor(cpu_sum, at::TensorOptions().dtype(at::kDouble));
}

double global_norm(const at::Tensor& sum_of_squares) {
  FT_ASSERT(sum_of_squares.defined() && sum_of_squares.numel() == 1, "a one-element sum of squares");
  return std::sqrt(sum_of_squares.item<double>());
}

double clip_coefficient(double total_norm, double max_norm) {
  FT_CHECK(std::isfinite(max_norm) && max_norm >= 0, "grad_clip must be a finite number >= 0, got ", max_norm);
  FT_ASSERT(std::isfinite(total_norm), "the caller checks the gradient norm is finite before clipping, got ",
            total_norm);
  if (max_norm == 0) return 1.0;
  return std::min(1.0, max_norm / (total_norm + 1e-6));
}

void scale_(at::TensorList tensors, double coef) {
  if (coef == 1.0) return;
  at::NoGradGuard no_grad;
  for (const at::Tensor& t : tensors) {
    if (t.defined()) t.mul_(coef);
  }
}

ClipResult clip_grad_norm_(at::TensorList grads, double max_norm) {
  FT_CHECK(std::isfinite(max_norm) && max_norm >= 0, "grad_clip must be a finite number >= 0, got ", max_norm);
  ClipResult result;
  result.total_norm = global_norm(local_sum_of_squares(grads));
  result.finite = std::isfinite(result.total_norm);
  result.coefficient = result.finite ? clip_coefficient(result.total_norm, max_norm) : 1.0;
  if (result.finite) scale_(grads, result.coefficient);
  return result;
}

}  // namespace ft::optim

// Global gradient-norm clipping with torch.nn.utils.clip_grad_norm_'s semantics (2-norm over all
// gradients as one vector; coef = max_norm / (norm + 1e-6) clamped to 1), split in three so that
// sharded strategies all-reduce the sum of squares across ranks before the square root. Only the
// 2-norm; no error_if_nonfinite: a non-finite norm is reported and the caller decides.
#pragma once

#include <ATen/core/ATen_fwd.h>
#include <ATen/core/Tensor.h>

namespace ft::optim {

// Sum over every element of every tensor of x^2, accumulated in double (fp32 squares summed in
// fp32 lose digits over 10^9 elements; double keeps the norm exact to ~1e-15 and lets ranks add
// their partial sums in any order to the same few ulps). Deterministic on the CPU: the same
// tensors give the same bits whatever the thread count. Tensors may be any floating dtype and
// device (non-CPU ones are reduced in fp32 per tensor on their device, then summed in double);
// undefined tensors are skipped. The result is a 0-dim float64 CPU tensor, ready to all-reduce.
at::Tensor local_sum_of_squares(at::TensorList tensors);

// sqrt(sum_of_squares) as a double: Inf or NaN when some gradient was Inf or NaN.
double global_norm(const at::Tensor& sum_of_squares);

// min(1, max_norm / (total_norm + 1e-6)); 1 when max_norm == 0 (clipping off). total_norm must be
// finite (check first: a non-finite norm means the step must be skipped or the run stopped).
double clip_coefficient(double total_norm, double max_norm);

// tensors *= coef in place (nothing when coef == 1, as multiplying by 1 changes no bits).
void scale_(at::TensorList tensors, double coef);

struct ClipResult {
  double total_norm = 0;    // before clipping
  double coefficient = 1;   // what the gradients were multiplied by (1 if not finite)
  bool finite = true;       // false: the gradients hold Inf/NaN and were left as they were
};

// The three above for gradients that are all on this process (one rank, or DDP after all-reduce).
ClipResult clip_grad_norm_(at::TensorList grads, double max_norm);

}  // namespace ft::optim

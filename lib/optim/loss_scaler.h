// Dynamic loss scaling for fp16 training with torch.cuda.amp.GradScaler's semantics (PyTorch
// 1.13): scale the loss, unscale the gradients, skip a step whose gradients hold Inf/NaN and back
// the scale off, grow it after growth_interval good steps in a row. Whether a step had Inf/NaN
// is the caller's decision (all-reduced across ranks), so every rank updates alike. No per-
// optimizer bookkeeping and no manual set_scale.
#pragma once

#include <cstdint>
#include <string>

#include <ATen/core/ATen_fwd.h>
#include <ATen/core/Tensor.h>

#include "util/json.h"

namespace ft::optim {

struct LossScalerOptions {
  double init_scale = 65536.0;          // 2^16
  double growth_factor = 2.0;           // > 1
  double backoff_factor = 0.5;          // in (0, 1)
  std::int64_t growth_interval = 2000;  // good steps in a row before the scale grows, > 0
};

// What a checkpoint keeps (GradScaler's state_dict "scale" and "_growth_tracker").
struct LossScalerState {
  float scale = 65536.0f;
  std::int64_t growth_tracker = 0;  // good steps in a row since the last change, < growth_interval
};

class LossScaler {
 public:
  explicit LossScaler(LossScalerOptions options = {});

  // The factor to multiply the loss by before backward (fp32, as GradScaler's _scale tensor).
  float scale() const { return scale_; }
  // 1/scale as GradScaler.unscale_ computes it: in double, then rounded to fp32.
  float inv_scale() const;
  // grads *= inv_scale() in place; returns true if this process found Inf/NaN in any of them
  // (checked before scaling). Combine the flag across ranks, then call update().
  bool unscale_(at::TensorList grads) const;

  // Ends a step: found_inf (agreed by every rank) backs the scale off and resets the count; else
  // the count grows and at growth_interval the scale grows (unless that overflows fp32), as
  // _amp_update_scale_. Returns true when the optimizer step should be taken (!found_inf).
  bool update(bool found_inf);

  std::int64_t growth_tracker() const { return growth_tracker_; }
  const LossScalerOptions& options() const { return options_; }

  LossScalerState state() const { return {scale_, growth_tracker_}; }
  void load_state(const LossScalerState& state);
  // {"scale": 65536.0, "growth_tracker": 0}; `source` (a file name) prefixes every error.
  Json state_json() const;
  void load_state_json(const Json& json, const std::string& source);

 private:
  LossScalerOptions options_;
  float scale_;
  std::int64_t growth_tracker_ = 0;
};

}  // namespace ft::optim

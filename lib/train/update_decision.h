// What to do with a step's gradients once its loss and global gradient norm are known (the same
// all-reduced numbers on every rank, so every rank decides alike without communicating):
//   - loss finite, gradients not, loss scaling on: an fp16 overflow at this scale: skip, lower
//     the scale (not an error);
//   - both finite and train.skip_spikes says the loss or norm spikes: skip (optim/spike_guard.h);
//   - both finite: apply the update;
//   - otherwise (a NaN/Inf loss, or Inf gradients without loss scaling): skip when
//     train.on_nonfinite is "skip", else stop the run before it reaches the weights.
// A pure function of its inputs, unit-tested branch by branch (tests/train/update_decision_test.cpp).
#pragma once

#include "config/choices.h"
#include "optim/spike_guard.h"

namespace ft::train {

enum class UpdateDecision { kApply, kSkipOverflow, kSkipSpike, kSkipNonfinite, kStop };

struct UpdatePolicy {
  bool loss_scaling = false;  // dynamic loss scaling is on (config::uses_loss_scaling)
  bool skip_spikes = false;   // train.skip_spikes
  config::OnNonfinite on_nonfinite = config::OnNonfinite::kStop;
};

// `spikes`: the guard's window before this step (read only; null without train.skip_spikes).
UpdateDecision decide_update(double loss, double grad_norm, const UpdatePolicy& policy,
                             const optim::SpikeGuard* spikes);

const char* decision_name(UpdateDecision decision);

}  // namespace ft::train

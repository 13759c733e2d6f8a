#include "train/update_decision.h"

#include <cmath>

namespace ft::train {

UpdateDecision decide_update(double loss, double grad_norm, const UpdatePolicy& policy,
                             const optim::SpikeGuard* spikes) {
  const bool loss_finite = std::isfinite(loss), grads_finite = std::isfinite(grad_norm);
  if (policy.loss_scaling && loss_finite && !grads_finite) return UpdateDecision::kSkipOverflow;
  if (loss_finite && grads_finite) {
    const bool spike = policy.skip_spikes && spikes != nullptr && spikes->would_spike(loss, grad_norm);
    return spike ? UpdateDecision::kSkipSpike : UpdateDecision::kApply;
  }
  return policy.on_nonfinite == config::OnNonfinite::kSkip ? UpdateDecision::kSkipNonfinite : UpdateDecision::kStop;
}

const char* decision_name(UpdateDecision decision) {
  switch (decision) {
    case UpdateDecision::kApply: return "apply";
    case UpdateDecision::kSkipOverflow: return "skip (overflow)";
    case UpdateDecision::kSkipSpike: return "skip (spike)";
    case UpdateDecision::kSkipNonfinite: return "skip (non-finite)";
    case UpdateDecision::kStop: return "stop";
  }
  return "?";
}

}  // namespace ft::train

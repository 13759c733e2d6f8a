// Loss-spike guard (train.skip_spikes), as OLMo-core's SkipStepOptimizer decides: a step is
// skipped when its loss or its gradient norm exceeds the mean of the previous values in a rolling
// window by more than sigma standard deviations (sample std). The guard starts once the window
// holds max(2, window / 2) values; every step's values enter the window, skipped ones too. The
// trainer feeds it the all-reduced loss and global gradient norm, the same bits on every rank,
// so every rank decides alike without communicating.
#pragma once

#include <cstddef>
#include <deque>
#include <string>

#include "util/json.h"

namespace ft::optim {

struct SpikeGuardOptions {
  std::size_t window = 128;  // OLMo-core's rolling_interval_length
  double sigma = 6.0;        // OLMo-core's sigma_factor
};

class SpikeGuard {
 public:
  explicit SpikeGuard(SpikeGuardOptions options = {});

  // Records this step's values and says whether to skip it.
  bool is_spike(double loss, double grad_norm);
  // What is_spike would say for these values, without recording them.
  bool would_spike(double loss, double grad_norm) const;
  // Adds this step's values to the window.
  void record(double loss, double grad_norm);

  const SpikeGuardOptions& options() const { return options_; }
  // {"losses": [...], "grad_norms": [...]} for checkpoints; `source` prefixes errors.
  Json state_json() const;
  void load_state_json(const Json& json, const std::string& source);

 private:
  SpikeGuardOptions options_;
  std::deque<double> losses_, grad_norms_;  // at most window + 1 (the current one last)
};

}  // namespace ft::optim

#include "train/loop_state.h"

#include <cmath>

namespace ft::train {
namespace {

optim::LossScalerOptions scaler_options(const config::TrainConfig& t) {
  optim::LossScalerOptions o;
  o.init_scale = t.loss_scale_init;
  o.growth_interval = t.loss_scale_growth_interval;
  return o;
}

}  // namespace

LoopState::LoopState(const config::TrainConfig& train)
    : scaler(scaler_options(train)),
      spike_guard(optim::SpikeGuardOptions{static_cast<std::size_t>(train.spike_window), train.spike_sigma}),
      first_eval_loss(NAN),
      keep_spike_history_(train.skip_spikes) {}

checkpoint::TrainingState LoopState::to_training_state(std::int64_t optimizer_updates) const {
  checkpoint::TrainingState s;
  s.step = step;
  s.total_steps = total_steps;
  s.optimizer_updates = optimizer_updates;
  s.sampler = position;
  s.loss_scaler = scaler.state_json();
  if (keep_spike_history_) s.spike_guard = spike_guard.state_json();
  s.skipped_steps = skipped_steps;
  s.overflow_steps = overflow_steps;
  s.spike_steps = spike_steps;
  s.first_eval_loss = first_eval_loss;
  s.lr = last_lr;
  return s;
}

void LoopState::restore(const checkpoint::TrainingState& s, const std::string& source) {
  step = s.step;
  total_steps = s.total_steps;
  position = s.sampler;
  scaler.load_state_json(s.loss_scaler, source);
  if (keep_spike_history_ && !s.spike_guard.empty()) spike_guard.load_state_json(s.spike_guard, source);
  skipped_steps = s.skipped_steps;
  overflow_steps = s.overflow_steps;
  spike_steps = s.spike_steps;
  first_eval_loss = s.first_eval_loss;
  last_lr = s.lr;
}

}  // namespace ft::train

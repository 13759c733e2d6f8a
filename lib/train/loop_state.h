// Everything the training loop carries from one step to the next, in one place: a checkpoint
// saves it as a whole (to_training_state) and a resumed run restores it as a whole (restore), so
// that a new piece of loop state cannot be forgotten by one of the two. The model, optimizer
// and RNG state live with the strategy and the checkpoint reader.
#pragma once

#include <cstdint>
#include <string>

#include "checkpoint/training_state.h"
#include "config/run_config.h"
#include "data/distributed_sampler.h"
#include "optim/loss_scaler.h"
#include "optim/spike_guard.h"

namespace ft::train {

struct LoopState {
  explicit LoopState(const config::TrainConfig& train);

  std::int64_t step = 0;         // optimizer steps done (trained, applied or skipped)
  std::int64_t total_steps = 0;  // the length the LR schedule is computed for
  data::SamplerState position;   // where the sampler stands after the last step trained
  optim::LossScaler scaler;      // dynamic loss scale (fp16)
  optim::SpikeGuard spike_guard;  // recent losses and gradient norms (train.skip_spikes)
  std::int64_t skipped_steps = 0;   // non-finite steps skipped
  std::int64_t overflow_steps = 0;  // fp16 overflow steps skipped
  std::int64_t spike_steps = 0;     // spikes skipped
  double first_eval_loss;           // NaN before any evaluation
  double last_lr = 0;               // the learning rate of the last step trained

  // The checkpoint's training_state.json; `optimizer_updates` from the strategy's AdamW.
  checkpoint::TrainingState to_training_state(std::int64_t optimizer_updates) const;
  // From a checkpoint's state; `source` (its folder) names it in errors.
  void restore(const checkpoint::TrainingState& state, const std::string& source);

 private:
  bool keep_spike_history_;  // train.skip_spikes: the guard's window is saved and restored
};

}  // namespace ft::train

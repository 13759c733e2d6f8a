// training_state.json: the loop's own position in a checkpoint, the same on every rank: the
// global step, the schedule's length, the sampler's epoch and position (in global samples, so
// another world size can continue), the loss scaler, and counters that metrics report.
#pragma once

#include <cstdint>
#include <string>

#include "data/distributed_sampler.h"
#include "util/json.h"

namespace ft::checkpoint {

constexpr const char* kTrainingStateFile = "training_state.json";

struct TrainingState {
  std::int64_t step = 0;             // optimizer steps done: training continues with step + 1
  std::int64_t total_steps = 0;      // the length the LR schedule was computed for
  std::int64_t optimizer_updates = 0;  // AdamW updates taken (skipped steps excluded): its bias correction
  data::SamplerState sampler;        // the position after `step`
  Json loss_scaler = Json::object();  // optim::LossScaler::state_json()
  Json spike_guard = Json::object();  // optim::SpikeGuard::state_json() (empty without train.skip_spikes)
  std::int64_t skipped_steps = 0;    // non-finite steps skipped
  std::int64_t overflow_steps = 0;   // fp16 overflow steps skipped
  std::int64_t spike_steps = 0;      // loss or gradient-norm spikes skipped
  double first_eval_loss = 0;        // NaN before any evaluation
  double lr = 0;                     // the last step's learning rate (for people reading the file)

  Json to_json() const;
  // Errors name `source` and the key.
  static TrainingState from_json(const Json& json, const std::string& source);
};

}  // namespace ft::checkpoint

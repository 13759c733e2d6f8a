// The training loop, as data flows through one optimizer step:
//   token file -> sampler (this rank's items) -> micro-batches -> forward -> loss sum
//   -> backward (strategy reduces gradients) -> global grad norm -> clip -> AdamW step
//   -> metrics line (rank 0) -> checkpoint every checkpoint.every_steps, at the end, and when a
//   stop signal arrived (stop_request.h).
// A run resumes from a checkpoint (resume.h says which) exactly where it stopped: weights,
// optimizer state, sampler position, loss scale and RNG, on any number of ranks.
// The loss of a step is the mean over every target token of all its micro-batches on all ranks:
// each micro-batch's summed loss is divided by that total (all-reduced before the first
// backward) and gradients are summed over ranks, so W ranks x micro-batch m give the gradient of
// 1 rank x micro-batch W*m. The loop names no backend and no strategy.
#pragma once

#include <c10/core/Device.h>

#include <memory>
#include <string>

#include "config/run_config.h"
#include "comm/communicator.h"

namespace ft::train {

struct TrainSummary {
  std::int64_t steps = 0;
  std::int64_t skipped_steps = 0;
  double final_loss = 0;
  double first_eval_loss = 0;  // NaN when there is no eval set
  double final_eval_loss = 0;
  double seconds = 0;
  std::int64_t resumed_from_step = 0;  // 0 for a fresh start
  bool stopped_by_signal = false;      // preempted: a checkpoint was saved, no results written
  double checkpoint_seconds = 0;       // training time spent saving checkpoints
};

struct ResumeOptions {
  std::string path;    // ft_train --resume PATH: this checkpoint, whatever checkpoint.resume says
  bool force = false;  // --resume-force: resume even when the config changed the math
};

// Runs a whole training run: prepares data, builds the model (LoRA or full), trains, evaluates
// and writes the results into config.run_dir. Throws ft::Error with the step on a non-finite
// loss (train.on_nonfinite = "stop") or any other failure.
// `device`: where the model and batches live (CPU, or this rank's GPU).
TrainSummary run_training(const config::RunConfig& config, comm::Communicator& comm,
                          c10::Device device = c10::kCPU, const ResumeOptions& resume = {});

}  // namespace ft::train

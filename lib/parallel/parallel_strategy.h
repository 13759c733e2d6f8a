// What the training loop needs from a data-parallel strategy, and nothing about how: DDP
// (replicated state, bucketed gradient all-reduce), ZeRO-1/2 (sharded optimizer state and
// gradients), FSDP (sharded parameters). The loop calls, per optimizer step:
//   before_backward(sync) per micro-batch -> finish_gradients() -> grad_sum_of_squares()
//   -> step(lr, clip) or skip_step()
// Adding a strategy is adding a file and a line in make_strategy, not editing the loop.
#pragma once

#include <ATen/core/Tensor.h>

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "config/run_config.h"
#include "dist/communicator.h"
#include "optim/adamw.h"

namespace ft::parallel {

using NamedParameters = std::vector<std::pair<std::string, at::Tensor>>;

struct StrategyOptions {
  optim::AdamWOptions adamw;
  double bucket_mb = 25;
  c10::ScalarType grad_comm_dtype = c10::ScalarType::Float;
  bool offload_optimizer = false;
  bool overlap_grad_reduce = true;
};

StrategyOptions strategy_options(const config::RunConfig& config);

// Time split of the last step, for metrics.
struct StepTimes {
  double communication = 0;  // waiting for collectives
  double optimizer = 0;      // AdamW and parameter refresh
  double bytes_reduced = 0;  // payload handed to collectives this step (before the algorithm's factor)
};

class ParallelStrategy {
 public:
  virtual ~ParallelStrategy() = default;
  virtual std::string name() const = 0;

  // Takes the trainable parameters (requires_grad, in model order, the same on every rank),
  // makes every rank start from rank 0's values, and creates the optimizer state.
  virtual void setup(NamedParameters params) = 0;
  // Before each micro-batch's backward; sync = false for accumulation micro-batches before the
  // last, which need no communication.
  virtual void before_backward(bool sync) = 0;
  // After the last micro-batch's backward: every gradient this rank needs is reduced (summed
  // over ranks).
  virtual void finish_gradients() = 0;
  // Sum of squared gradient elements over the whole model (all shards), identical on every rank.
  virtual double grad_sum_of_squares() = 0;
  // Gradients *= clip_coef, AdamW with `lr`, parameters refreshed on every rank, gradients zeroed.
  virtual void step(double lr, double clip_coef) = 0;
  // Drops this step's gradients without updating (a skipped non-finite step).
  virtual void skip_step() = 0;
  virtual StepTimes take_step_times() = 0;
  // The optimizer of this rank (its shard), for checkpoints.
  virtual optim::AdamW& optimizer() = 0;
};

std::unique_ptr<ParallelStrategy> make_strategy(const config::RunConfig& config, dist::Communicator& comm);

}  // namespace ft::parallel

// What the training loop needs from a data-parallel strategy, and nothing about how: DDP
// (replicated state, bucketed gradient all-reduce), ZeRO-1/2 (sharded optimizer state and
// gradients), FSDP (sharded parameters). The loop calls, per optimizer step:
//   before_backward(sync) per micro-batch -> finish_gradients() -> grad_sum_of_squares()
//   -> step(lr, clip) or skip_step()
// Adding a strategy is adding a file, a line in make_strategy (parallel_strategy.cpp) and its row
// of strategy_traits.h (what it shards, for the planner), not editing the loop.
#pragma once

#include <ATen/core/Tensor.h>

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "config/run_config.h"
#include "comm/communicator.h"
#include "model/llama_model.h"
#include "model/offloaded_inputs.h"
#include "optim/adamw.h"
#include "parallel/shard_layout.h"

namespace ft::parallel {

class OptimizerShard;

using NamedParameters = std::vector<std::pair<std::string, at::Tensor>>;

struct StrategyOptions {
  optim::AdamWOptions adamw;
  bool decay_norms = false;  // weight decay on 1-D parameters (norm weights) too
  c10::Device device = c10::kCPU;  // where the parameters train (FSDP places its buffers there)
  double bucket_mb = 25;
  c10::ScalarType grad_comm_dtype = c10::ScalarType::Float;
  bool offload_optimizer = false;
  bool overlap_grad_reduce = true;
  std::size_t fsdp_prefetch = 1;  // FSDP: layer units gathered ahead of their use
  bool fsdp_reshard_after_forward = true;  // FSDP: false keeps each layer whole from its forward to its backward
  // LibTorch threads for an optimizer step that runs on the CPU (offloaded, or a CPU run): the
  // fused AdamW splits across them; 0 leaves LibTorch's setting (the trainer keeps it at 1).
  int host_threads = 0;
};

// `local_ranks`: the ranks sharing this node's cores (for the host threads of an optimizer step).
StrategyOptions strategy_options(const config::RunConfig& config, int local_ranks = 1);

// Time split of the last step, for metrics.
struct StepTimes {
  double communication = 0;  // waiting for collectives
  double optimizer = 0;      // AdamW and parameter refresh
  // Payload handed to collectives this step, before the algorithm's factor: the all-reduce tensor,
  // the reduce-scatter input and the all-gather output (each the full-size buffer, so that DDP,
  // ZeRO-1 and ZeRO-2 are comparable: on the wire a ring all-reduce moves 2(W-1)/W of its payload,
  // reduce-scatter and all-gather (W-1)/W each).
  double bytes_reduced = 0;
};

// Bytes this rank holds for training state, counted from the tensors the strategy owns (the
// memory test compares them with the ZeRO paper's formulas).
struct MemoryReport {
  std::int64_t parameters = 0;        // model weights in the compute dtype (trainable, this rank's share)
  std::int64_t gradients = 0;         // gradient buffers
  std::int64_t optimizer = 0;         // fp32 master weights + AdamW state on the device
  std::int64_t host_optimizer = 0;    // the same in host memory (optimizer offload)
  std::int64_t host_gradients = 0;    // fp32 gradient (shard) copied to the host for the offloaded step
  std::int64_t grad_staging = 0;      // ZeRO-2's bucket buffers in flight during backward, at peak
  std::int64_t gathered = 0;          // transient full copies (FSDP's gathered layers), at peak
};

class ParallelStrategy {
 public:
  virtual ~ParallelStrategy() = default;
  virtual std::string name() const = 0;

  // Takes the trainable parameters (requires_grad, in model order, the same on every rank) and
  // for each the decoder layer the model says it belongs to (-1: outside the layers; see
  // model::decoder_layers_of; FSDP makes one unit per layer), makes every rank start from rank
  // 0's values, and creates the optimizer state.
  virtual void setup(NamedParameters params, const std::vector<std::int64_t>& layers) = 0;
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

  // For checkpoints: this rank's fp32 master weights and AdamW state (optimizer_shard().master()
  // and optimizer().state(), live buffers) described as pieces of the parameters. `replicated`:
  // every rank holds the same whole state (DDP), so a checkpoint needs one copy of it.
  virtual OptimizerShard& optimizer_shard() = 0;
  virtual std::vector<ShardPiece> shard_pieces() const = 0;
  virtual bool state_replicated() const { return false; }
  // Collective: after a checkpoint was read into the master weights, makes the parameters (in
  // the compute dtype, on every rank) equal to them again, as after an optimizer step.
  virtual void reload_parameters_from_master() = 0;

  // The hook the model's forward runs each decoder layer through (FSDP gathers the layer's
  // parameters around it; with activation checkpointing the layer is recomputed in backward).
  // The default: checkpointing (its layers' inputs in host memory when `offload` is enabled) or nothing.
  virtual model::LayerRunner layer_runner(bool activation_checkpointing, model::InputOffload offload = {});
  // Before each forward (FSDP gathers the parameters outside the layers).
  virtual void before_forward() {}
  virtual MemoryReport memory() const = 0;
  // Collective: every trainable parameter whole, in model order, one at a time or one layer at
  // a time (never the whole model twice); `fn` is called on rank 0 only.
  virtual void for_each_full_parameter(const std::function<void(const std::string&, const at::Tensor&)>& fn) = 0;
};

// `device`: where training runs. FSDP builds its sharded buffers there, so the model may be
// loaded on the host and only each rank's shards (and each gathered layer) ever reach the device.
std::unique_ptr<ParallelStrategy> make_strategy(const config::RunConfig& config, comm::Communicator& comm,
                                                c10::Device device = c10::kCPU);

}  // namespace ft::parallel

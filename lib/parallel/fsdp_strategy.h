// FSDP (fully sharded data parallel, as PyTorch's FullyShardedDataParallel with FULL_SHARD):
// the parameters themselves are sharded. The trainable parameters are grouped into units, one
// per decoder layer plus a root unit for the rest (embeddings, final norm, lm_head), each laid
// out as one padded flat buffer split into W equal chunks (shard_layout.h with a bucket per
// unit). A rank keeps only its chunks: parameters in the compute dtype, gradients, fp32 master
// and AdamW state (on the host with parallel.offload_optimizer) — 16Ψ/W in mixed precision.
//
// A layer unit is whole only around its use: all-gathered just before the layer's forward and
// released after it (its storage freed while the module's parameters stay views into it, so
// autograd's saved references see the values gathered again later); gathered again when
// backward reaches the layer (a hook on the layer's output, which with activation checkpointing
// fires just before the recomputation); its gradients are reduce-scattered as soon as they are
// all accumulated, and the unit released. So at most a layer or two are whole at a time. The
// root unit stays whole (its parameters are used at both ends of the model), refreshed by an
// all-gather after each optimizer step.
//
// Prefetch (parallel.fsdp_prefetch = k, as PyTorch FSDP's forward_prefetch and BACKWARD_PRE):
// when a layer's unit is in use, the gathers of the next k units in execution order are already
// issued, so that they travel while the layer computes. Forward goes 0..L-1, backward L-1..0:
// the last layer stays whole from its forward to its backward, and backward prefetches the layers
// below. Nothing is prefetched past layer 0 in backward (the optimizer step changes the shards).
// With k = 0 every gather waits at the point of use. At most 2 + k layers are whole at a time.
//
// parallel.fsdp_reshard_after_forward = false (PyTorch FSDP2's reshard_after_forward=False, FSDP's
// SHARD_GRAD_OP): a layer gathered for its forward stays whole until its gradients are handed to
// the reduce-scatter, so backward gathers nothing: a gather per layer and micro-batch instead of
// two, for every layer whole at the end of forward (ZeRO-2's parameter memory during the step,
// sharded between steps).
#pragma once

#include <memory>
#include <vector>

#include "parallel/flat_parameters.h"
#include "parallel/optimizer_shard.h"
#include "parallel/parallel_strategy.h"
#include "parallel/reduce_scatter_buckets.h"
#include "parallel/shard_layout.h"

namespace ft::parallel {

class FsdpStrategy : public ParallelStrategy {
 public:
  FsdpStrategy(comm::Communicator& comm, StrategyOptions options);
  ~FsdpStrategy() override;
  std::string name() const override { return "fsdp"; }
  void setup(NamedParameters params, const std::vector<std::int64_t>& layers) override;
  void before_backward(bool sync) override;
  void finish_gradients() override;
  double grad_sum_of_squares() override;
  void step(double lr, double clip_coef) override;
  void skip_step() override;
  StepTimes take_step_times() override;
  optim::AdamW& optimizer() override { return shard_->optimizer(); }
  OptimizerShard& optimizer_shard() override { return *shard_; }
  std::vector<ShardPiece> shard_pieces() const override;
  void reload_parameters_from_master() override;
  model::LayerRunner layer_runner(bool activation_checkpointing, model::InputOffload offload = {}) override;
  MemoryReport memory() const override;
  void for_each_full_parameter(const std::function<void(const std::string&, const at::Tensor&)>& fn) override;

  const ShardLayout& layout() const { return *layout_; }
  // Units whose parameters are whole right now, or being gathered (the root one included).
  std::size_t gathered_units() const;
  // Gathers that were issued where the unit was needed, not ahead of it, since the last call.
  std::size_t take_gathers_at_use();

 private:
  struct Unit {
    std::size_t bucket = 0;                 // its bucket in layout_ (units are in bucket order)
    std::unique_ptr<FlatParameters> flat;   // the whole unit; storage freed while released
    bool resident = false;                  // the root unit: never released
    bool gathered = false;                  // its buffer is allocated (and whole once `pending` is done)
    std::shared_ptr<comm::Work> pending;    // the all-gather in flight into it
  };
  // Makes the unit whole for use: waits for its prefetch, or gathers it now.
  void gather(Unit& unit);
  // Unless the unit is whole or on its way: re-allocates its flat buffer and issues the all-gather.
  void start_gather(Unit& unit);
  // All-gathers the unit's chunks into its allocated flat buffer (in flight until finish_gather).
  void issue_all_gather(Unit& unit);
  // Waits for the unit's all-gather in flight, if any.
  void finish_gather(Unit& unit);
  // Issues the gathers of the `fsdp_prefetch` layer units that follow unit `unit` in execution
  // order (forward: the layers above it; backward: the layers below).
  void prefetch_after(std::size_t unit, bool backward);
  // Frees the unit's full buffer (not the root unit's), once its gather in flight has landed.
  void release(Unit& unit);
  void release_layers();

  comm::Communicator& comm_;
  StrategyOptions options_;
  std::unique_ptr<ShardLayout> layout_;
  std::vector<Unit> units_;  // the root unit (if any) first, then the layers' in layer order
  std::vector<int> unit_of_layer_;  // decoder layer -> unit, -1 when it has no trainable parameter
  struct SlotRef {
    std::size_t unit = 0, index = 0;  // parameter `index` of unit `unit`
  };
  std::vector<SlotRef> slot_refs_;  // per trainable parameter, in model order
  std::vector<std::string> slot_names_;
  std::vector<std::int64_t> slot_numels_;
  at::Tensor shard_values_;  // this rank's parameter chunks in the compute dtype [shard_numel]
  at::Tensor shard_grad_;    // this rank's gradient chunks [shard_numel]
  std::unique_ptr<ReduceScatterBuckets> reduce_scatter_;
  std::unique_ptr<OptimizerShard> shard_;
  StepTimes times_;
  std::int64_t gathered_bytes_ = 0, peak_gathered_bytes_ = 0;
  std::size_t gathers_at_use_ = 0;
};

}  // namespace ft::parallel

// ZeRO-1 and ZeRO-2 (Rajbhandari et al., arXiv 1910.02054): every rank holds the whole model in
// the compute dtype, but only its 1/W shard of the fp32 master weights and AdamW state
// (shard_layout.h: chunk `rank` of every gradient bucket). ZeRO-1 all-reduces the gradients in
// buckets during backward as DDP does and keeps the full gradient; ZeRO-2 reduce-scatters them
// bucket by bucket during backward and keeps only its shard (reduce_scatter_buckets.h). Then each
// rank clips and updates its shard (on the host with parallel.offload_optimizer) and the updated
// parameters are all-gathered, bucket by bucket, in the compute dtype straight into the model.
#pragma once

#include <memory>
#include <optional>

#include "parallel/flat_parameters.h"
#include "parallel/grad_buckets.h"
#include "parallel/optimizer_shard.h"
#include "parallel/parallel_strategy.h"
#include "parallel/reduce_scatter_buckets.h"
#include "parallel/shard_layout.h"

namespace ft::parallel {

class ZeroStrategy : public ParallelStrategy {
 public:
  // stage 1: sharded optimizer state; stage 2: also sharded gradients.
  ZeroStrategy(int stage, comm::Communicator& comm, StrategyOptions options);
  std::string name() const override { return stage_ == 1 ? "zero1" : "zero2"; }
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
  MemoryReport memory() const override;
  void for_each_full_parameter(const std::function<void(const std::string&, const at::Tensor&)>& fn) override;

  const ShardLayout& layout() const { return *layout_; }
  FlatParameters& flat() { return *flat_; }

 private:
  // This rank's gradient shard, as views (ZeRO-1: chunks of the flat gradient; ZeRO-2: the shard).
  std::vector<at::Tensor> gradient_shard();
  void zero_gradients();

  int stage_;
  comm::Communicator& comm_;
  StrategyOptions options_;
  std::unique_ptr<ShardLayout> layout_;
  std::unique_ptr<FlatParameters> flat_;
  std::vector<std::string> slot_names_;
  std::vector<std::int64_t> slot_numels_;
  std::unique_ptr<GradBuckets> all_reduce_;            // ZeRO-1
  at::Tensor shard_grad_;                              // ZeRO-2: [shard_numel] in the compute dtype
  std::unique_ptr<ReduceScatterBuckets> reduce_scatter_;  // ZeRO-2
  std::unique_ptr<OptimizerShard> shard_;
  StepTimes times_;
};

}  // namespace ft::parallel

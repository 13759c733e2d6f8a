// DDP: every rank holds the whole model and optimizer state; gradients are summed over ranks in
// buckets of parallel.bucket_mb (in parallel.grad_comm_dtype) launched during backward as soon as
// each bucket is complete (grad_buckets.h), only on the last micro-batch of an optimizer step.
// The master weights are the flat parameters themselves in fp32, or an fp32 copy when the model
// computes in bf16/fp16; with parallel.offload_optimizer, an fp32 copy and the AdamW state in host
// memory (optimizer_shard.h), updated there from a host copy of the gradient.
#pragma once

#include <memory>

#include "parallel/flat_parameters.h"
#include "parallel/grad_buckets.h"
#include "parallel/optimizer_shard.h"
#include "parallel/parallel_strategy.h"

namespace ft::parallel {

class DdpStrategy : public ParallelStrategy {
 public:
  DdpStrategy(comm::Communicator& comm, StrategyOptions options);
  std::string name() const override { return "ddp"; }
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
  bool state_replicated() const override { return true; }
  void reload_parameters_from_master() override;
  MemoryReport memory() const override;
  void for_each_full_parameter(const std::function<void(const std::string&, const at::Tensor&)>& fn) override;

  FlatParameters& flat() { return *flat_; }

 private:
  comm::Communicator& comm_;
  StrategyOptions options_;
  std::unique_ptr<FlatParameters> flat_;
  std::unique_ptr<GradBuckets> buckets_;
  std::unique_ptr<OptimizerShard> shard_;  // the whole model's; aliases flat_->values() in fp32 without offload
  StepTimes times_;
};

}  // namespace ft::parallel

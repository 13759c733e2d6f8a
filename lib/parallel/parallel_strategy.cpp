#include "parallel/parallel_strategy.h"

#include "io/dtype.h"
#include "model/activation_checkpoint.h"
#include "parallel/ddp_strategy.h"
#include "parallel/fsdp_strategy.h"
#include "parallel/zero_strategy.h"
#include "util/cpu_threads.h"

namespace ft::parallel {

model::LayerRunner ParallelStrategy::layer_runner(bool activation_checkpointing, model::InputOffload offload) {
  if (activation_checkpointing) return model::activation_checkpointing_runner(offload);
  return {};
}

StrategyOptions strategy_options(const config::RunConfig& c, int local_ranks) {
  StrategyOptions o;
  o.adamw.beta1 = c.train.adam_beta1;
  o.adamw.beta2 = c.train.adam_beta2;
  o.adamw.eps = c.train.adam_eps;
  o.adamw.weight_decay = c.train.weight_decay;
  o.decay_norms = c.train.weight_decay_norms;
  o.bucket_mb = c.parallel.bucket_mb;
  o.grad_comm_dtype = io::scalar_type(c.parallel.grad_comm_dtype);
  o.offload_optimizer = c.parallel.offload_optimizer;
  o.overlap_grad_reduce = c.parallel.overlap_grad_reduce;
  o.fsdp_prefetch = static_cast<std::size_t>(c.parallel.fsdp_prefetch);
  o.fsdp_reshard_after_forward = c.parallel.fsdp_reshard_after_forward;
  o.host_threads = threads_per_rank(c.train.threads, local_ranks);
  return o;
}

std::unique_ptr<ParallelStrategy> make_strategy(const config::RunConfig& c, comm::Communicator& comm,
                                                c10::Device device) {
  StrategyOptions options = strategy_options(c, comm.local_world_size());
  options.device = device;
  switch (c.parallel.strategy) {
    case config::Strategy::kDdp: return std::make_unique<DdpStrategy>(comm, options);
    case config::Strategy::kZero1: return std::make_unique<ZeroStrategy>(1, comm, options);
    case config::Strategy::kZero2: return std::make_unique<ZeroStrategy>(2, comm, options);
    case config::Strategy::kFsdp: return std::make_unique<FsdpStrategy>(comm, options);
  }
  return nullptr;
}

}  // namespace ft::parallel

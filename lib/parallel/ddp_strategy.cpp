#include "parallel/ddp_strategy.h"

#include <torch/torch.h>

#include <cstdlib>
#include <thread>

#include "optim/grad_clip.h"
#include "parallel/fsdp_strategy.h"
#include "parallel/zero_strategy.h"
#include "util/error.h"
#include "util/timer.h"

namespace ft::parallel {

DdpStrategy::DdpStrategy(dist::Communicator& comm, StrategyOptions options) : comm_(comm), options_(options) {}

void DdpStrategy::setup(NamedParameters params) {
  std::vector<at::Tensor> tensors;
  for (auto& [name, p] : params) tensors.push_back(p);
  flat_ = std::make_unique<FlatParameters>(std::move(params));
  buckets_ = std::make_unique<GradBuckets>(*flat_, std::move(tensors), comm_, options_.bucket_mb,
                                           options_.grad_comm_dtype, options_.overlap_grad_reduce);
  // Every rank starts from rank 0's weights (LoRA init or a loaded model may differ by rank).
  comm_.broadcast(flat_->values(), 0)->wait();
  const bool alias = flat_->values().scalar_type() == torch::kFloat && !options_.offload_optimizer;
  shard_ = std::make_unique<OptimizerShard>(flat_->values(), alias, flat_->decay_segments(options_.decay_norms), options_);
}

void DdpStrategy::before_backward(bool sync) { buckets_->arm(sync); }

void DdpStrategy::finish_gradients() {
  times_.communication += buckets_->finish();
  if (comm_.world_size() > 1)
    times_.bytes_reduced += static_cast<double>(flat_->numel()) * c10::elementSize(options_.grad_comm_dtype);
}

double DdpStrategy::grad_sum_of_squares() {
  return optim::local_sum_of_squares({flat_->grads()}).item<double>();
}

void DdpStrategy::step(double lr, double clip_coef) {
  Stopwatch watch;
  shard_->step(shard_->fp32_gradient({flat_->grads()}), lr, clip_coef);
  if (!shard_->aliased()) shard_->copy_master_to(flat_->values());
  flat_->zero_grads();
  times_.optimizer += watch.seconds();
}

void DdpStrategy::skip_step() { flat_->zero_grads(); }

std::vector<ShardPiece> DdpStrategy::shard_pieces() const {
  std::vector<ShardPiece> pieces;
  for (const FlatSlot& s : flat_->slots()) pieces.push_back({s.name, 0, s.numel, s.offset});
  return pieces;
}

void DdpStrategy::reload_parameters_from_master() {
  torch::NoGradGuard no_grad;
  if (!shard_->aliased()) shard_->copy_master_to(flat_->values());
}

MemoryReport DdpStrategy::memory() const {
  MemoryReport m;
  m.parameters = flat_->values().nbytes();
  m.gradients = flat_->grads().nbytes();
  (shard_->offloaded() ? m.host_optimizer : m.optimizer) = shard_->state_bytes();
  m.host_gradients = shard_->host_gradient_bytes();
  return m;
}

void DdpStrategy::for_each_full_parameter(const std::function<void(const std::string&, const at::Tensor&)>& fn) {
  if (!comm_.is_root()) return;  // every rank holds the same full parameters
  for (const FlatSlot& s : flat_->slots()) fn(s.name, flat_->values().narrow(0, s.offset, s.numel).view(s.shape));
}

StepTimes DdpStrategy::take_step_times() {
  StepTimes t = times_;
  times_ = {};
  return t;
}

StrategyOptions strategy_options(const config::RunConfig& c) {
  StrategyOptions o;
  o.adamw.beta1 = c.train.adam_beta1;
  o.adamw.beta2 = c.train.adam_beta2;
  o.adamw.eps = c.train.adam_eps;
  o.adamw.weight_decay = c.train.weight_decay;
  o.decay_norms = c.train.weight_decay_norms;
  o.bucket_mb = c.parallel.bucket_mb;
  o.grad_comm_dtype = c.parallel.grad_comm_dtype == "bf16"   ? torch::kBFloat16
                      : c.parallel.grad_comm_dtype == "fp16" ? torch::kHalf
                                                              : torch::kFloat;
  o.offload_optimizer = c.parallel.offload_optimizer;
  o.overlap_grad_reduce = c.parallel.overlap_grad_reduce;
  // The trainer's rule for train.threads: 0 = the cores shared by this node's ranks.
  const char* local = std::getenv("LOCAL_WORLD_SIZE");
  const int local_ranks = local != nullptr ? std::max(1, std::atoi(local)) : 1;
  o.host_threads = c.train.threads > 0 ? static_cast<int>(c.train.threads)
                                       : std::max(1, static_cast<int>(std::thread::hardware_concurrency()) / local_ranks);
  return o;
}

std::unique_ptr<ParallelStrategy> make_strategy(const config::RunConfig& c, dist::Communicator& comm,
                                                c10::Device device) {
  StrategyOptions options = strategy_options(c);
  options.device = device;
  if (c.parallel.strategy == "ddp") return std::make_unique<DdpStrategy>(comm, options);
  if (c.parallel.strategy == "zero1") return std::make_unique<ZeroStrategy>(1, comm, options);
  if (c.parallel.strategy == "zero2") return std::make_unique<ZeroStrategy>(2, comm, options);
  if (c.parallel.strategy == "fsdp") return std::make_unique<FsdpStrategy>(comm, options);
  FT_CHECK(false, "parallel.strategy \"", c.parallel.strategy, "\" is unknown (use ddp, zero1, zero2 or fsdp)");
  return nullptr;
}

}  // namespace ft::parallel

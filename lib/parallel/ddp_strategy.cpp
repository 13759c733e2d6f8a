#include "parallel/ddp_strategy.h"

#include <torch/torch.h>


#include "optim/grad_clip.h"
#include "util/error.h"
#include "util/timer.h"

namespace ft::parallel {

DdpStrategy::DdpStrategy(comm::Communicator& comm, StrategyOptions options) : comm_(comm), options_(options) {}

void DdpStrategy::setup(NamedParameters params, const std::vector<std::int64_t>& /*layers: one unit*/) {
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

}  // namespace ft::parallel

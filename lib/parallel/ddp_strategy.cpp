#include "parallel/ddp_strategy.h"

#include <torch/torch.h>

#include "optim/grad_clip.h"
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
  master_ = flat_->values().scalar_type() == torch::kFloat ? flat_->values() : flat_->values().to(torch::kFloat);
  optimizer_ = std::make_unique<optim::AdamW>(master_.numel(), flat_->decay_segments(), options_.adamw,
                                              master_.device());
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
  at::Tensor grad = flat_->grads().scalar_type() == torch::kFloat ? flat_->grads() : flat_->grads().to(torch::kFloat);
  if (clip_coef != 1.0) grad.mul_(clip_coef);
  optimizer_->step(master_, grad, lr);
  if (!master_.is_same(flat_->values())) {
    torch::NoGradGuard no_grad;
    flat_->values().copy_(master_);
  }
  flat_->zero_grads();
  times_.optimizer += watch.seconds();
}

void DdpStrategy::skip_step() { flat_->zero_grads(); }

MemoryReport DdpStrategy::memory() const {
  MemoryReport m;
  m.parameters = flat_->values().nbytes();
  m.gradients = flat_->grads().nbytes();
  const auto state = optimizer_->state();
  m.optimizer = state.exp_avg.nbytes() + state.exp_avg_sq.nbytes() + (master_.is_same(flat_->values()) ? 0 : master_.nbytes());
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
  o.bucket_mb = c.parallel.bucket_mb;
  o.grad_comm_dtype = c.parallel.grad_comm_dtype == "bf16"   ? torch::kBFloat16
                      : c.parallel.grad_comm_dtype == "fp16" ? torch::kHalf
                                                              : torch::kFloat;
  o.offload_optimizer = c.parallel.offload_optimizer;
  o.overlap_grad_reduce = c.parallel.overlap_grad_reduce;
  return o;
}

std::unique_ptr<ParallelStrategy> make_strategy(const config::RunConfig& c, dist::Communicator& comm) {
  const StrategyOptions options = strategy_options(c);
  if (c.parallel.strategy == "ddp") return std::make_unique<DdpStrategy>(comm, options);
  FT_CHECK(false, "parallel.strategy \"", c.parallel.strategy, "\" is not available yet in this build (use \"ddp\")");
  return nullptr;
}

}  // namespace ft::parallel

#include "parallel/ddp_strategy.h"

#include <torch/torch.h>

#include "optim/grad_clip.h"
#include "util/error.h"
#include "util/timer.h"

namespace ft::parallel {

DdpStrategy::DdpStrategy(dist::Communicator& comm, StrategyOptions options) : comm_(comm), options_(options) {}

void DdpStrategy::setup(NamedParameters params) {
  flat_ = std::make_unique<FlatParameters>(std::move(params));
  // Every rank starts from rank 0's weights (LoRA init or a loaded model may differ by rank).
  comm_.broadcast(flat_->values(), 0)->wait();
  master_ = flat_->values().scalar_type() == torch::kFloat ? flat_->values() : flat_->values().to(torch::kFloat);
  optimizer_ = std::make_unique<optim::AdamW>(master_.numel(), flat_->decay_segments(), options_.adamw,
                                              master_.device());
}

void DdpStrategy::before_backward(bool sync) { sync_ = sync; }

void DdpStrategy::finish_gradients() {
  FT_ASSERT(sync_, "finish_gradients after the last micro-batch");
  if (comm_.world_size() == 1) return;
  Stopwatch watch;
  at::Tensor& grads = flat_->grads();
  const std::int64_t element_bytes = c10::elementSize(options_.grad_comm_dtype);
  const std::int64_t bucket = std::max<std::int64_t>(1, static_cast<std::int64_t>(options_.bucket_mb * (1 << 20)) / element_bytes);
  std::vector<std::pair<std::shared_ptr<dist::Work>, std::pair<at::Tensor, at::Tensor>>> inflight;
  // Buckets from the end of the buffer: the last layers' gradients are ready first in backward.
  for (std::int64_t end = grads.numel(); end > 0; end -= bucket) {
    const std::int64_t begin = std::max<std::int64_t>(0, end - bucket);
    at::Tensor slice = grads.narrow(0, begin, end - begin);
    at::Tensor wire = slice.scalar_type() == options_.grad_comm_dtype ? slice : slice.to(options_.grad_comm_dtype);
    inflight.push_back({comm_.all_reduce(wire, dist::ReduceOp::kSum), {slice, wire}});
  }
  for (auto& [work, tensors] : inflight) {
    work->wait();
    if (!tensors.first.is_same(tensors.second)) tensors.first.copy_(tensors.second);
  }
  times_.communication += watch.seconds();
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
  return o;
}

std::unique_ptr<ParallelStrategy> make_strategy(const config::RunConfig& c, dist::Communicator& comm) {
  const StrategyOptions options = strategy_options(c);
  if (c.parallel.strategy == "ddp") return std::make_unique<DdpStrategy>(comm, options);
  FT_CHECK(false, "parallel.strategy \"", c.parallel.strategy, "\" is not available yet in this build (use \"ddp\")");
  return nullptr;
}

}  // namespace ft::parallel

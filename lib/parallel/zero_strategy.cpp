// ZeRO-1/2: flat parameters in shard_layout's padded order, gradients all-reduced (1) or
// reduce-scattered (2) in buckets during backward, AdamW on this rank's shard (optimizer_shard.h,
// on the host when offloaded), parameters all-gathered per bucket in the compute dtype.
#include "parallel/zero_strategy.h"

#include <torch/torch.h>

#include <deque>

#include "optim/grad_clip.h"
#include "util/error.h"
#include "util/timer.h"

namespace ft::parallel {

ZeroStrategy::ZeroStrategy(int stage, comm::Communicator& comm, StrategyOptions options)
    : stage_(stage), comm_(comm), options_(options) {
  FT_ASSERT(stage == 1 || stage == 2, "ZeRO stage 1 or 2, got ", stage);
}

void ZeroStrategy::setup(NamedParameters params, const std::vector<std::int64_t>& /*layers: one unit*/) {
  std::vector<at::Tensor> tensors;
  std::vector<std::int64_t> numels;
  for (auto& [name, p] : params) {
    tensors.push_back(p);
    numels.push_back(p.numel());
    slot_names_.push_back(name);
  }
  slot_numels_ = numels;
  FT_CHECK(!tensors.empty(), "there are no trainable parameters");
  layout_ = std::make_unique<ShardLayout>(numels, comm_.world_size(), comm_.rank(),
                                          bucket_elements(options_.bucket_mb, options_.grad_comm_dtype));
  flat_ = std::make_unique<FlatParameters>(std::move(params), layout_->slot_offsets(), layout_->numel(),
                                           /*with_grads=*/stage_ == 1);
  // Every rank starts from rank 0's weights (LoRA init or a loaded model may differ by rank).
  comm_.broadcast(flat_->values(), 0)->wait();

  // This rank's chunks of the parameters, side by side: the shard's starting values.
  torch::NoGradGuard no_grad;
  at::Tensor initial = torch::empty({layout_->shard_numel()}, flat_->values().options());
  for (const ShardBucket& b : layout_->buckets())
    initial.narrow(0, b.shard_offset, b.chunk).copy_(flat_->values().narrow(0, layout_->chunk_begin(b), b.chunk));
  shard_ = std::make_unique<OptimizerShard>(initial, /*alias=*/false, layout_->shard_segments(flat_->decay_segments(options_.decay_norms)),
                                            options_);

  if (stage_ == 1) {
    std::vector<BucketRange> ranges;
    for (const ShardBucket& b : layout_->buckets()) {
      BucketRange r;
      r.begin = b.begin;
      r.end = b.begin + layout_->region_numel(b);
      r.slots = b.slots;
      ranges.push_back(std::move(r));
    }
    all_reduce_ = std::make_unique<GradBuckets>(*flat_, std::move(tensors), comm_, std::move(ranges),
                                                options_.grad_comm_dtype, options_.overlap_grad_reduce);
  } else {
    shard_grad_ = torch::zeros({layout_->shard_numel()}, flat_->values().options());
    reduce_scatter_ = std::make_unique<ReduceScatterBuckets>(*layout_, std::move(tensors), comm_, shard_grad_,
                                                             options_.grad_comm_dtype, options_.overlap_grad_reduce);
  }
}

void ZeroStrategy::before_backward(bool sync) {
  if (stage_ == 1) {
    all_reduce_->arm(sync);
  } else {
    // ZeRO-2 reduces every micro-batch (there is no full gradient to accumulate into).
    times_.communication += reduce_scatter_->begin_backward();
  }
}

void ZeroStrategy::finish_gradients() {
  if (stage_ == 1) {
    times_.communication += all_reduce_->finish();
    if (comm_.world_size() > 1)
      times_.bytes_reduced += static_cast<double>(flat_->numel()) * c10::elementSize(options_.grad_comm_dtype);
  } else {
    times_.communication += reduce_scatter_->finish() + reduce_scatter_->take_wait_in_backward();
    times_.bytes_reduced += reduce_scatter_->take_bytes();
  }
}

std::vector<at::Tensor> ZeroStrategy::gradient_shard() {
  if (stage_ == 2) return {shard_grad_};
  std::vector<at::Tensor> pieces;
  for (const ShardBucket& b : layout_->buckets())
    pieces.push_back(flat_->grads().narrow(0, layout_->chunk_begin(b), b.chunk));
  return pieces;
}

double ZeroStrategy::grad_sum_of_squares() {
  // Each rank's shard, summed over ranks: one all-reduce, so every rank gets the same bits.
  const double local = optim::local_sum_of_squares(gradient_shard()).item<double>();
  return comm::all_reduce_scalar(comm_, local, comm::ReduceOp::kSum);
}

void ZeroStrategy::step(double lr, double clip_coef) {
  Stopwatch watch;
  torch::NoGradGuard no_grad;
  const at::Tensor grad = shard_->fp32_gradient(gradient_shard());
  shard_->step(grad, lr, clip_coef);
  reload_parameters_from_master();
  zero_gradients();
  times_.optimizer += watch.seconds();
}

std::vector<ShardPiece> ZeroStrategy::shard_pieces() const { return layout_->shard_pieces(slot_names_, slot_numels_); }

// The master shard in the compute dtype, all-gathered bucket by bucket into the flat parameters.
void ZeroStrategy::reload_parameters_from_master() {
  torch::NoGradGuard no_grad;
  // The updated shard in the compute dtype on the parameters' device (a copy back from the host
  // when offloaded), gathered bucket by bucket straight into the flat parameters.
  const at::Tensor& master = shard_->master();
  at::Tensor& values = flat_->values();
  at::Tensor update = master;
  if (master.device() != values.device() || master.scalar_type() != values.scalar_type()) {
    update = torch::empty({layout_->shard_numel()}, values.options());
    shard_->copy_master_to(update);
  }
  // A few buckets in flight at a time: a backend may stage each one (Gloo flattens the output
  // into a temporary), and this bounds that to a few buckets instead of the whole model.
  std::deque<std::shared_ptr<comm::Work>> works;
  for (const ShardBucket& b : layout_->buckets()) {
    at::Tensor region = values.narrow(0, b.begin, layout_->region_numel(b));
    works.push_back(comm_.all_gather(region, update.narrow(0, b.shard_offset, b.chunk)));
    for (; works.size() > ReduceScatterBuckets::kMaxInFlight; works.pop_front()) works.front()->wait();
  }
  for (; !works.empty(); works.pop_front()) works.front()->wait();
  if (comm_.world_size() > 1) times_.bytes_reduced += static_cast<double>(values.nbytes());
}

void ZeroStrategy::zero_gradients() {
  if (stage_ == 1) {
    flat_->zero_grads();
  } else {
    shard_grad_.zero_();
  }
}

void ZeroStrategy::skip_step() { zero_gradients(); }

MemoryReport ZeroStrategy::memory() const {
  MemoryReport m;
  m.parameters = flat_->values().nbytes();
  m.gradients = stage_ == 1 ? flat_->grads().nbytes() : shard_grad_.nbytes();
  (shard_->offloaded() ? m.host_optimizer : m.optimizer) = shard_->state_bytes();
  m.host_gradients = shard_->host_gradient_bytes();
  if (reduce_scatter_) m.grad_staging = reduce_scatter_->peak_staging_bytes();
  return m;
}

void ZeroStrategy::for_each_full_parameter(const std::function<void(const std::string&, const at::Tensor&)>& fn) {
  if (!comm_.is_root()) return;  // after each step's all-gather every rank holds the full parameters
  for (const FlatSlot& s : flat_->slots()) fn(s.name, flat_->values().narrow(0, s.offset, s.numel).view(s.shape));
}

StepTimes ZeroStrategy::take_step_times() {
  StepTimes t = times_;
  times_ = {};
  return t;
}

}  // namespace ft::parallel

// ZeRO-2 buckets: copy each gradient out of .grad into a staging buffer and free it, reduce-scatter
// each complete bucket during backward, add this rank's chunk into the gradient shard.
#include "parallel/reduce_scatter_buckets.h"

#include <torch/torch.h>

#include "parallel/grad_buckets.h"
#include "util/error.h"
#include "util/timer.h"

namespace ft::parallel {

ReduceScatterBuckets::ReduceScatterBuckets(const ShardLayout& layout, std::vector<at::Tensor> params,
                                           comm::Communicator& comm, at::Tensor shard_grad, c10::ScalarType wire_dtype,
                                           bool overlap)
    : layout_(layout), params_(std::move(params)), comm_(comm), shard_grad_(std::move(shard_grad)),
      wire_dtype_(wire_dtype), overlap_(overlap) {
  FT_ASSERT(layout.world_size() == comm.world_size() && layout.rank() == comm.rank(), "layout for this rank");
  FT_ASSERT(shard_grad_.numel() == layout.shard_numel(), "the gradient shard has the layout's shard size");
  buckets_.resize(layout.buckets().size());
  bucket_of_slot_.assign(params_.size(), buckets_.size());
  for (std::size_t b = 0; b < buckets_.size(); ++b)
    for (std::size_t s : layout.buckets()[b].slots) bucket_of_slot_[s] = b;
  for (std::size_t i = 0; i < params_.size(); ++i) {
    FT_ASSERT(bucket_of_slot_[i] < buckets_.size(), "every parameter in a bucket");
    FT_ASSERT(!params_[i].grad().defined(), "ZeRO-2 parameters have no .grad before backward");
    accumulators_.push_back(add_post_accumulate_hook(params_[i], [this, i] { on_ready(i); }));
  }
  for (std::size_t b = 0; b < buckets_.size(); ++b) buckets_[b].pending = layout.buckets()[b].slots.size();
}

ReduceScatterBuckets::~ReduceScatterBuckets() = default;

double ReduceScatterBuckets::begin_backward() {
  const double waited = finish();
  in_backward_ = true;
  launched_in_backward_ = 0;
  return waited;
}

void ReduceScatterBuckets::stage(std::size_t b) {
  Bucket& bucket = buckets_[b];
  if (bucket.staging.defined()) return;
  const ShardBucket& sb = layout_.buckets()[b];
  // Zeros: the padding, and any parameter that gets no gradient, reduce as zeros.
  auto options = shard_grad_.options().dtype(wire_dtype_);
  bucket.staging = torch::zeros({layout_.region_numel(sb)}, options);
  bucket.output = torch::empty({sb.chunk}, options);
  live_bytes_ += bucket.staging.nbytes() + bucket.output.nbytes();
  peak_bytes_ = std::max(peak_bytes_, live_bytes_);
}

void ReduceScatterBuckets::on_ready(std::size_t slot) {
  FT_ASSERT(in_backward_, "a ZeRO-2 backward runs between before_backward() and finish_gradients()");
  const std::size_t b = bucket_of_slot_[slot];
  Bucket& bucket = buckets_[b];
  FT_ASSERT(bucket.pending > 0 && !bucket.launched, "a parameter's gradient arrived twice in one backward (slot ",
            slot, ")");
  at::Tensor& grad = params_[slot].mutable_grad();
  FT_ASSERT(grad.defined(), "the hook runs after the gradient was accumulated");
  stage(b);
  {
    torch::NoGradGuard no_grad;
    const std::int64_t at = layout_.slot_offsets()[slot] - layout_.buckets()[b].begin;
    bucket.staging.narrow(0, at, grad.numel()).view(grad.sizes()).copy_(grad);
  }
  grad.reset();  // the full-size gradient does not outlive its copy
  if (--bucket.pending == 0) {
    launch(b);
    if (!finishing_) ++launched_in_backward_;
    // Bound the staging memory: wait for the oldest buckets beyond the limit.
    const std::size_t limit = overlap_ ? kMaxInFlight : 0;
    if (!finishing_ && in_flight_.size() > limit) {
      Stopwatch watch;
      while (in_flight_.size() > limit) {
        const std::size_t oldest = in_flight_.front();
        in_flight_.pop_front();
        retire(oldest);
      }
      wait_in_backward_ += watch.seconds();
    }
  }
}

void ReduceScatterBuckets::launch(std::size_t b) {
  Bucket& bucket = buckets_[b];
  stage(b);
  bucket.launched = true;
  bucket.work = comm_.reduce_scatter(bucket.output, bucket.staging, comm::ReduceOp::kSum);
  if (comm_.world_size() > 1) bytes_ += static_cast<double>(bucket.staging.nbytes());
  in_flight_.push_back(b);
  if (on_launch_) on_launch_(b);
}

void ReduceScatterBuckets::retire(std::size_t b) {
  Bucket& bucket = buckets_[b];
  bucket.work->wait();
  const ShardBucket& sb = layout_.buckets()[b];
  {
    torch::NoGradGuard no_grad;
    shard_grad_.narrow(0, sb.shard_offset, sb.chunk).add_(bucket.output);  // rounds once to the shard's dtype
  }
  release(bucket);
}

void ReduceScatterBuckets::release(Bucket& bucket) {
  live_bytes_ -= bucket.staging.nbytes() + bucket.output.nbytes();
  bucket.staging = at::Tensor();
  bucket.output = at::Tensor();
  bucket.work.reset();
}

double ReduceScatterBuckets::finish() {
  if (!in_backward_) return 0.0;
  Stopwatch watch;
  finishing_ = true;
  // Buckets still missing gradients (parameters that took no part), in the same order on every rank.
  for (std::size_t b = 0; b < buckets_.size(); ++b)
    if (!buckets_[b].launched) launch(b);
  while (!in_flight_.empty()) {
    const std::size_t b = in_flight_.front();
    in_flight_.pop_front();
    retire(b);
  }
  for (std::size_t b = 0; b < buckets_.size(); ++b) {
    buckets_[b].launched = false;
    buckets_[b].pending = layout_.buckets()[b].slots.size();
  }
  // Parameters whose bucket was launched from here never reached their hook's reset.
  for (at::Tensor& p : params_) p.mutable_grad().reset();
  finishing_ = false;
  in_backward_ = false;
  return watch.seconds();
}

double ReduceScatterBuckets::take_wait_in_backward() {
  const double w = wait_in_backward_;
  wait_in_backward_ = 0;
  return w;
}

double ReduceScatterBuckets::take_bytes() {
  const double b = bytes_;
  bytes_ = 0;
  return b;
}

}  // namespace ft::parallel

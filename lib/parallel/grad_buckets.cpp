#include "parallel/grad_buckets.h"

#include <torch/csrc/autograd/function.h>
#include <torch/csrc/autograd/function_hook.h>
#include <torch/torch.h>

#include "util/error.h"
#include "util/timer.h"

namespace ft::parallel {
namespace {

// Runs a callback after a leaf's gradient has been accumulated into its .grad.
struct AfterAccumulate : torch::autograd::FunctionPostHook {
  explicit AfterAccumulate(std::function<void()> callback) : callback(std::move(callback)) {}
  torch::autograd::variable_list operator()(const torch::autograd::variable_list& outputs,
                                            const torch::autograd::variable_list&) override {
    callback();
    return outputs;
  }
  std::function<void()> callback;
};

}  // namespace

GradBuckets::GradBuckets(FlatParameters& flat, std::vector<at::Tensor> params, dist::Communicator& comm,
                         double bucket_mb, c10::ScalarType wire_dtype, bool overlap)
    : flat_(flat), comm_(comm), wire_dtype_(wire_dtype), overlap_(overlap) {
  const auto& slots = flat.slots();
  FT_ASSERT(params.size() == slots.size(), "one parameter per flat slot");
  const std::int64_t bucket_elements =
      std::max<std::int64_t>(1, static_cast<std::int64_t>(bucket_mb * (1 << 20)) / c10::elementSize(wire_dtype));
  bucket_of_slot_.resize(slots.size());
  // From the last slot backwards; the padding at the end of the buffer joins the first bucket.
  Bucket current;
  current.end = flat.numel();
  for (std::size_t i = slots.size(); i-- > 0;) {
    current.slots.push_back(i);
    current.begin = slots[i].offset;
    if (current.end - current.begin >= bucket_elements || i == 0) {
      for (std::size_t s : current.slots) bucket_of_slot_[s] = buckets_.size();
      buckets_.push_back(current);
      current = Bucket();
      current.end = slots[i].offset;
    }
  }
  for (std::size_t i = 0; i < params.size(); ++i) {
    auto accumulator = torch::autograd::impl::grad_accumulator(params[i]);
    FT_ASSERT(accumulator != nullptr, "trainable parameters are leaves that require grad: ", slots[i].name);
    accumulator->add_post_hook(std::make_unique<AfterAccumulate>([this, i] { on_ready(i); }));
    accumulators_.push_back(accumulator);
  }
}

GradBuckets::~GradBuckets() = default;

void GradBuckets::arm(bool sync) {
  armed_ = sync && comm_.world_size() > 1;
  launched_in_backward_ = 0;
  for (Bucket& b : buckets_) {
    b.pending = b.slots.size();
    b.work.reset();
  }
}

void GradBuckets::on_ready(std::size_t slot) {
  if (!armed_) return;
  Bucket& b = buckets_[bucket_of_slot_[slot]];
  FT_ASSERT(b.pending > 0, "a parameter's gradient arrived twice in one backward: ", flat_.slots()[slot].name);
  if (--b.pending == 0 && overlap_) {
    launch(b);
    if (!finishing_) ++launched_in_backward_;
  }
}

void GradBuckets::launch(Bucket& b) {
  at::Tensor slice = flat_.grads().narrow(0, b.begin, b.end - b.begin);
  b.wire = slice.scalar_type() == wire_dtype_ ? slice : slice.to(wire_dtype_);
  b.work = comm_.all_reduce(b.wire, dist::ReduceOp::kSum);
}

double GradBuckets::finish() {
  if (!armed_) return 0.0;
  Stopwatch watch;
  finishing_ = true;
  for (Bucket& b : buckets_)
    if (!b.work) launch(b);  // parameters that took no part in this backward
  for (Bucket& b : buckets_) {
    b.work->wait();
    at::Tensor slice = flat_.grads().narrow(0, b.begin, b.end - b.begin);
    if (!b.wire.is_same(slice)) slice.copy_(b.wire);
    b.work.reset();
    b.wire = at::Tensor();
  }
  finishing_ = false;
  armed_ = false;
  return watch.seconds();
}

}  // namespace ft::parallel

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

std::shared_ptr<void> add_post_accumulate_hook(const at::Tensor& param, std::function<void()> callback) {
  auto accumulator = torch::autograd::impl::grad_accumulator(param);
  FT_ASSERT(accumulator != nullptr, "trainable parameters are leaves that require grad");
  accumulator->add_post_hook(std::make_unique<AfterAccumulate>(std::move(callback)));
  // A shared_ptr in LibTorch 1.13, an intrusive_ptr in 2.x: the holder keeps either alive.
  return std::make_shared<decltype(accumulator)>(std::move(accumulator));
}

std::int64_t bucket_elements(double bucket_mb, c10::ScalarType wire_dtype) {
  return std::max<std::int64_t>(1, static_cast<std::int64_t>(bucket_mb * (1 << 20)) / c10::elementSize(wire_dtype));
}

std::vector<std::vector<std::size_t>> plan_buckets(const std::vector<std::int64_t>& slot_numels,
                                                   std::int64_t elements) {
  std::vector<std::vector<std::size_t>> groups;
  std::vector<std::size_t> current;
  std::int64_t size = 0;
  for (std::size_t i = slot_numels.size(); i-- > 0;) {
    current.push_back(i);
    size += slot_numels[i];
    if (size >= elements || i == 0) {
      groups.push_back(std::move(current));
      current.clear();
      size = 0;
    }
  }
  return groups;
}

namespace {

// Contiguous buckets of the flat buffer; the padding at its end joins the first bucket.
std::vector<BucketRange> contiguous_buckets(const FlatParameters& flat, std::int64_t elements) {
  const auto& slots = flat.slots();
  std::vector<std::int64_t> numels;
  for (const FlatSlot& s : slots) numels.push_back(s.numel);
  std::vector<BucketRange> buckets;
  std::int64_t end = flat.numel();
  for (auto& group : plan_buckets(numels, elements)) {
    BucketRange b;
    b.begin = slots[group.back()].offset;
    b.end = end;
    b.slots = std::move(group);
    end = b.begin;
    buckets.push_back(std::move(b));
  }
  return buckets;
}

}  // namespace

GradBuckets::GradBuckets(FlatParameters& flat, std::vector<at::Tensor> params, comm::Communicator& comm,
                         double bucket_mb, c10::ScalarType wire_dtype, bool overlap)
    : GradBuckets(flat, std::move(params), comm, contiguous_buckets(flat, bucket_elements(bucket_mb, wire_dtype)),
                  wire_dtype, overlap) {}

GradBuckets::GradBuckets(FlatParameters& flat, std::vector<at::Tensor> params, comm::Communicator& comm,
                         std::vector<BucketRange> ranges, c10::ScalarType wire_dtype, bool overlap)
    : flat_(flat), comm_(comm), wire_dtype_(wire_dtype), overlap_(overlap) {
  const auto& slots = flat.slots();
  FT_ASSERT(params.size() == slots.size(), "one parameter per flat slot");
  FT_ASSERT(flat.grads().defined(), "gradient buckets reduce a flat gradient");
  bucket_of_slot_.assign(slots.size(), ranges.size());
  for (BucketRange& r : ranges) {
    Bucket b;
    b.begin = r.begin;
    b.end = r.end;
    b.slots = std::move(r.slots);
    for (std::size_t s : b.slots) {
      FT_ASSERT(s < slots.size() && bucket_of_slot_[s] == ranges.size(), "each slot in exactly one bucket");
      FT_ASSERT(slots[s].offset >= b.begin && slots[s].offset + slots[s].numel <= b.end, "a bucket holds its slots");
      bucket_of_slot_[s] = buckets_.size();
    }
    buckets_.push_back(std::move(b));
  }
  for (std::size_t s = 0; s < slots.size(); ++s) FT_ASSERT(bucket_of_slot_[s] < buckets_.size(), "every slot in a bucket");
  for (std::size_t i = 0; i < params.size(); ++i)
    accumulators_.push_back(add_post_accumulate_hook(params[i], [this, i] { on_ready(i); }));
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
  b.work = comm_.all_reduce(b.wire, comm::ReduceOp::kSum);
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

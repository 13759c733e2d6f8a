// Gradient buckets that are reduced while backward is still running. The flat gradient buffer
// is cut into buckets of about bucket_mb, from its end (the last layers' gradients are ready
// first in backward). A hook after each parameter's gradient accumulation counts the parameters
// still missing in its bucket; the bucket's all-reduce starts as soon as the count reaches zero,
// on the communicator's thread, while backward goes on with earlier layers. Only armed for the
// last micro-batch of an optimizer step: accumulation micro-batches communicate nothing.
#pragma once

#include <ATen/core/Tensor.h>

#include <functional>
#include <memory>
#include <vector>

#include "comm/communicator.h"
#include "parallel/flat_parameters.h"

namespace ft::parallel {

// Elements of one bucket for bucket_mb megabytes of the wire dtype (at least 1).
std::int64_t bucket_elements(double bucket_mb, c10::ScalarType wire_dtype);

// Groups parameters (given by their element counts, in flat order) into buckets of at least
// `elements` elements, from the last parameter backwards (the order backward produces them); the
// first bucket holds the last parameters. Each group lists its slot indices, last slot first.
std::vector<std::vector<std::size_t>> plan_buckets(const std::vector<std::int64_t>& slot_numels, std::int64_t elements);

// Runs `callback` after autograd has accumulated `param`'s gradient into its .grad (a post hook on
// the parameter's AccumulateGrad node). Returns the node: keep it alive as long as the hook.
std::shared_ptr<void> add_post_accumulate_hook(const at::Tensor& param, std::function<void()> callback);

// A bucket given by its owner: the element range [begin, end) of the flat gradient and the slots in it.
struct BucketRange {
  std::int64_t begin = 0, end = 0;
  std::vector<std::size_t> slots;
};

class GradBuckets {
 public:
  GradBuckets(FlatParameters& flat, std::vector<at::Tensor> params, comm::Communicator& comm, double bucket_mb,
              c10::ScalarType wire_dtype, bool overlap = true);
  // Buckets as given (ZeRO-1: regions padded to a multiple of the world size, so that each rank's
  // shard of a bucket is one slice). Every slot is in exactly one bucket.
  GradBuckets(FlatParameters& flat, std::vector<at::Tensor> params, comm::Communicator& comm,
              std::vector<BucketRange> buckets, c10::ScalarType wire_dtype, bool overlap = true);
  ~GradBuckets();

  // Arms the hooks for the coming backward (sync) or disarms them (accumulation micro-batch).
  void arm(bool sync);
  // Starts the buckets whose parameters got no gradient, waits for every bucket, and writes the
  // summed gradients back. Returns the seconds spent waiting.
  double finish();

  std::size_t num_buckets() const { return buckets_.size(); }
  // Buckets launched from inside backward on the last step (overlap), for tests and metrics.
  std::size_t launched_during_backward() const { return launched_in_backward_; }

 private:
  struct Bucket {
    std::int64_t begin = 0, end = 0;  // element range of the flat gradient
    std::vector<std::size_t> slots;
    std::size_t pending = 0;
    at::Tensor wire;  // the slice, or a copy in the wire dtype
    std::shared_ptr<comm::Work> work;
  };
  void on_ready(std::size_t slot);
  void launch(Bucket& bucket);

  FlatParameters& flat_;
  comm::Communicator& comm_;
  c10::ScalarType wire_dtype_;
  std::vector<Bucket> buckets_;
  std::vector<std::size_t> bucket_of_slot_;
  std::vector<std::shared_ptr<void>> accumulators_;  // keeps the hooked AccumulateGrad nodes alive
  bool overlap_;
  bool armed_ = false;
  bool finishing_ = false;
  std::size_t launched_in_backward_ = 0;
};

}  // namespace ft::parallel

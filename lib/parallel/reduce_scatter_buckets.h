// ZeRO-2's gradient path: no full-size gradient is kept. Right after autograd accumulates a
// parameter's gradient (post-accumulate hook), it is copied into its bucket's staging buffer (in
// the wire dtype, laid out as the bucket's padded region of shard_layout.h) and the parameter's
// .grad is released. A complete bucket is reduce-scattered at once, while backward goes on; when
// it completes, this rank's chunk is added into the rank's gradient shard and the staging buffer
// freed. At most kMaxInFlight buckets are in flight (the hook waits for the oldest beyond that),
// so staging memory stays at a few buckets whatever the model size. Every micro-batch is reduced,
// accumulation ones included: without a full gradient there is nowhere to accumulate locally.
#pragma once

#include <ATen/core/Tensor.h>

#include <deque>
#include <functional>
#include <memory>
#include <vector>

#include "comm/communicator.h"
#include "parallel/shard_layout.h"

namespace ft::parallel {

class ReduceScatterBuckets {
 public:
  static constexpr std::size_t kMaxInFlight = 2;

  // params: the trainable parameters in slot order (their .grad must be undefined); shard_grad:
  // this rank's gradient shard [layout.shard_numel()], which the reduced chunks are added into.
  // overlap = false: each bucket is waited for as soon as it is launched (no overlap with backward).
  ReduceScatterBuckets(const ShardLayout& layout, std::vector<at::Tensor> params, comm::Communicator& comm,
                       at::Tensor shard_grad, c10::ScalarType wire_dtype, bool overlap);
  ~ReduceScatterBuckets();

  // Before each micro-batch's backward: completes the previous backward's buckets. Returns the
  // seconds spent waiting.
  double begin_backward();
  // After a backward: launches the buckets whose parameters got no gradient (zeros), waits for
  // every bucket and adds its chunk into the shard. Returns the seconds spent waiting.
  double finish();

  // Seconds spent waiting inside backward (the in-flight bound), since the last call.
  double take_wait_in_backward();
  // Bytes handed to reduce_scatter (the staging buffers), since the last call.
  double take_bytes();
  // The most staging + chunk bytes that were alive at once.
  std::int64_t peak_staging_bytes() const { return peak_bytes_; }
  std::size_t launched_during_backward() const { return launched_in_backward_; }
  // Called with a bucket's index when it is launched: its parameters' gradients are all copied
  // out, so backward is done with them (FSDP frees the unit's gathered parameters then).
  void on_launch(std::function<void(std::size_t)> fn) { on_launch_ = std::move(fn); }

 private:
  struct Bucket {
    std::size_t pending = 0;
    bool launched = false;
    at::Tensor staging, output;
    std::shared_ptr<comm::Work> work;
  };
  void on_ready(std::size_t slot);
  void stage(std::size_t b);
  void launch(std::size_t b);
  void retire(std::size_t b);
  void release(Bucket& bucket);

  const ShardLayout& layout_;
  std::vector<at::Tensor> params_;
  comm::Communicator& comm_;
  at::Tensor shard_grad_;
  c10::ScalarType wire_dtype_;
  bool overlap_;
  std::vector<Bucket> buckets_;
  std::vector<std::size_t> bucket_of_slot_;
  std::vector<std::shared_ptr<void>> accumulators_;
  std::function<void(std::size_t)> on_launch_;
  std::deque<std::size_t> in_flight_;
  bool in_backward_ = false;  // a backward ran since the last finish()
  bool finishing_ = false;
  std::size_t launched_in_backward_ = 0;
  double wait_in_backward_ = 0, bytes_ = 0;
  std::int64_t live_bytes_ = 0, peak_bytes_ = 0;
};

}  // namespace ft::parallel

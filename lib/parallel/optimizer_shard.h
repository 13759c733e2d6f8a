// The fp32 master weights and AdamW state of the elements one rank updates (the whole model for
// DDP, the rank's shard for ZeRO), on the parameters' device or, with parallel.offload_optimizer,
// in host memory (pinned when the parameters are on CUDA, so copies run at full PCIe speed): the
// gradient is copied into a host fp32 buffer, the fused multi-threaded CPU AdamW updates the
// master there, and the strategy copies the master back in the compute dtype. Between a GPU and
// the host, bf16/fp16 data crosses PCIe as it is, through a small pinned buffer, and is converted
// on the host: half the bytes of fp32, and no fp32 temporary of the shard's size on the GPU.
#pragma once

#include <ATen/core/Tensor.h>

#include <memory>
#include <vector>

#include "optim/adamw.h"
#include "parallel/parallel_strategy.h"

namespace ft::parallel {

// dst = src (1-D, same numel, any dtypes and devices) through `buffer` (1-D), one buffer-full at
// a time: src -> buffer, buffer -> dst.
void copy_in_chunks(const at::Tensor& dst, const at::Tensor& src, const at::Tensor& buffer);

class OptimizerShard {
 public:
  // `initial`: the values to update, [numel] in the compute dtype on the parameters' device.
  // alias: use `initial` itself as the master (fp32 parameters, no offload: DDP).
  OptimizerShard(const at::Tensor& initial, bool alias, std::vector<optim::DecaySegment> segments,
                 const StrategyOptions& options);

  // The gradient as one contiguous fp32 [numel] tensor where the optimizer runs, from pieces
  // that concatenate to it (any float dtype, on the parameters' device): the host buffer with
  // offload; else the piece itself when it is a single fp32 tensor (clipping then scales it in
  // place); else a fresh fp32 tensor.
  at::Tensor fp32_gradient(const std::vector<at::Tensor>& pieces);
  // grad *= clip_coef, then AdamW on the master (on the host: with options.host_threads threads).
  void step(const at::Tensor& grad, double lr, double clip_coef);
  // dst (1-D [numel], the compute dtype, on the parameters' device) = the master.
  void copy_master_to(const at::Tensor& dst);

  const at::Tensor& master() const { return master_; }
  bool aliased() const { return aliased_; }
  bool offloaded() const { return offload_; }
  optim::AdamW& optimizer() { return *optimizer_; }
  // fp32 master (unless aliased to the parameters) + exp_avg + exp_avg_sq.
  std::int64_t state_bytes() const;
  // The host fp32 gradient buffer (offload only).
  std::int64_t host_gradient_bytes() const { return host_grad_.defined() ? host_grad_.nbytes() : 0; }

 private:
  // Copies src into dst where one of them is on the host and the other on a GPU.
  void transfer(const at::Tensor& dst, const at::Tensor& src);

  bool offload_ = false, aliased_ = false;
  int host_threads_ = 0;
  c10::Device param_device_;
  c10::ScalarType compute_dtype_;
  at::Tensor master_, host_grad_;
  at::Tensor transfer_;  // pinned host buffer in the compute dtype (offload from a GPU only)
  std::unique_ptr<optim::AdamW> optimizer_;
};

}  // namespace ft::parallel

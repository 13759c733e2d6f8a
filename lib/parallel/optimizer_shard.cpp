// Master weights and AdamW state, on the device or offloaded to (pinned) host memory. Copies are
// synchronous: the host must see the whole gradient before AdamW reads it, and the caller
// all-gathers or copies the master right after the update.
#include "parallel/optimizer_shard.h"

#include <ATen/Parallel.h>
#include <torch/torch.h>

#include "util/error.h"

namespace ft::parallel {
namespace {

// fp32 [numel] for the optimizer: on `device`, or on the host (pinned for CUDA parameters).
at::Tensor state_buffer(std::int64_t numel, c10::Device param_device, bool offload) {
  auto options = torch::TensorOptions().dtype(torch::kFloat);
  if (!offload) return torch::empty({numel}, options.device(param_device));
  // Pinned memory needs CUDA at run time: only asked for when the parameters are on a GPU.
  return torch::empty({numel}, options.device(torch::kCPU).pinned_memory(param_device.is_cuda()));
}

// LibTorch's intra-op threads set to `threads` for the scope (the trainer keeps them at 1 for the
// BLAS pool's sake; BLAS is idle during the optimizer step).
class IntraOpThreads {
 public:
  explicit IntraOpThreads(int threads) : saved_(at::get_num_threads()) {
    if (threads > 0 && threads != saved_) at::set_num_threads(threads);
  }
  ~IntraOpThreads() {
    if (at::get_num_threads() != saved_) at::set_num_threads(saved_);
  }

 private:
  int saved_;
};

// Elements per host<->GPU transfer through the pinned buffer (32 MB of bf16).
constexpr std::int64_t kTransferElements = 16 << 20;

}  // namespace

void copy_in_chunks(const at::Tensor& dst, const at::Tensor& src, const at::Tensor& buffer) {
  FT_ASSERT(dst.dim() == 1 && src.dim() == 1 && buffer.dim() == 1 && dst.numel() == src.numel() && buffer.numel() > 0,
            "copy_in_chunks: 1-D tensors of the same size and a non-empty buffer");
  torch::NoGradGuard no_grad;
  const std::int64_t n = src.numel(), step = buffer.numel();
  for (std::int64_t at = 0; at < n; at += step) {
    const std::int64_t len = std::min(step, n - at);
    at::Tensor b = buffer.narrow(0, 0, len);
    b.copy_(src.narrow(0, at, len));
    dst.narrow(0, at, len).copy_(b);
  }
}

OptimizerShard::OptimizerShard(const at::Tensor& initial, bool alias, std::vector<optim::DecaySegment> segments,
                               const StrategyOptions& options)
    : offload_(options.offload_optimizer), aliased_(alias), host_threads_(options.host_threads),
      param_device_(initial.device()), compute_dtype_(initial.scalar_type()) {
  FT_ASSERT(initial.dim() == 1 && initial.is_contiguous(), "optimizer values are one contiguous 1-D tensor");
  const c10::Device device = initial.device();
  if (alias) {
    FT_ASSERT(!offload_ && initial.scalar_type() == torch::kFloat, "only fp32 values on their device are aliased");
    master_ = initial;
  } else {
    torch::NoGradGuard no_grad;
    master_ = state_buffer(initial.numel(), device, offload_);
    transfer(master_, initial);
  }
  if (offload_) host_grad_ = state_buffer(initial.numel(), device, true);
  optimizer_ = std::make_unique<optim::AdamW>(master_.numel(), std::move(segments), options.adamw, master_.device());
}

void OptimizerShard::transfer(const at::Tensor& dst, const at::Tensor& src) {
  torch::NoGradGuard no_grad;
  const bool crossing = dst.device() != src.device();
  if (!crossing || (dst.scalar_type() == src.scalar_type())) {
    dst.copy_(src);  // on one device, or a plain memcpy into/out of pinned memory
    return;
  }
  if (!transfer_.defined()) {
    transfer_ = torch::empty({std::min(kTransferElements, std::max<std::int64_t>(1, master_.numel()))},
                             torch::TensorOptions().dtype(compute_dtype_).pinned_memory(param_device_.is_cuda()));
  }
  copy_in_chunks(dst.view({-1}), src.reshape({-1}), transfer_);
}

void OptimizerShard::copy_master_to(const at::Tensor& dst) {
  IntraOpThreads threads(master_.device().is_cpu() ? host_threads_ : 0);
  transfer(dst, master_);
}

at::Tensor OptimizerShard::fp32_gradient(const std::vector<at::Tensor>& pieces) {
  torch::NoGradGuard no_grad;
  IntraOpThreads threads(master_.device().is_cpu() ? host_threads_ : 0);
  if (!offload_ && pieces.size() == 1 && pieces[0].scalar_type() == torch::kFloat && pieces[0].is_contiguous() &&
      pieces[0].dim() == 1)
    return pieces[0];
  at::Tensor out = offload_ ? host_grad_ : torch::empty({master_.numel()}, master_.options());
  std::int64_t at = 0;
  for (const at::Tensor& p : pieces) {
    transfer(out.narrow(0, at, p.numel()), p.reshape({-1}));
    at += p.numel();
  }
  FT_ASSERT(at == master_.numel(), "gradient pieces (", at, " elements) cover the optimizer's ", master_.numel());
  return out;
}

void OptimizerShard::step(const at::Tensor& grad, double lr, double clip_coef) {
  torch::NoGradGuard no_grad;
  if (clip_coef != 1.0) grad.mul_(clip_coef);
  IntraOpThreads threads(master_.device().is_cpu() ? host_threads_ : 0);
  optimizer_->step(master_, grad, lr);
}

std::int64_t OptimizerShard::state_bytes() const {
  const auto state = optimizer_->state();
  return state.exp_avg.nbytes() + state.exp_avg_sq.nbytes() + (aliased_ ? 0 : master_.nbytes());
}

}  // namespace ft::parallel

// AdamW over one flat fp32 parameter buffer (a model's trainable parameters, or one rank's shard
// of them) and its flat fp32 gradient, exactly torch.optim.AdamW (PyTorch 1.13 single-tensor path,
// amsgrad=False, maximize=False) with weight decay switched per contiguous range. The optimizer
// owns exp_avg, exp_avg_sq and the step count; it does not own the parameters or the gradient,
// and knows nothing of ranks: a sharded strategy gives it its shard and slice_segments().
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include <ATen/core/Tensor.h>
#include <c10/core/Device.h>

namespace ft::optim {

// Elements [offset, offset + length) of the flat buffer; decay = false for norms and biases.
struct DecaySegment {
  std::int64_t offset = 0;
  std::int64_t length = 0;
  bool decay = true;
};

// One segment covering a buffer of `numel` elements.
std::vector<DecaySegment> uniform_segments(std::int64_t numel, bool decay);

// Throws ft::Error unless the segments are in order, without gaps or overlaps, and cover exactly
// [0, numel). Zero-length segments are allowed (a shard may cut one down to nothing).
void check_segments(const std::vector<DecaySegment>& segments, std::int64_t numel);

// The segments of elements [offset, offset + length) of the buffer the given segments describe,
// renumbered from 0: what one rank's optimizer gets when it owns that slice (ZeRO, FSDP).
std::vector<DecaySegment> slice_segments(const std::vector<DecaySegment>& segments, std::int64_t offset,
                                         std::int64_t length);

struct AdamWOptions {
  double beta1 = 0.9;
  double beta2 = 0.999;
  double eps = 1e-8;
  double weight_decay = 0.0;  // decoupled, applied to the segments with decay = true
  // CPU only. true: one fused pass over raw pointers split across threads. false: the same
  // sequence of LibTorch tensor ops that CUDA tensors always use (for tests without a GPU).
  bool fused_cpu = true;
};

// The optimizer state for checkpoints.
struct AdamWState {
  std::int64_t step = 0;  // updates taken
  at::Tensor exp_avg;     // fp32 [numel]
  at::Tensor exp_avg_sq;  // fp32 [numel]
};

class AdamW {
 public:
  // State for a buffer of `numel` elements, zero-filled on `device` (where the update runs: the
  // parameters' device, or the CPU when optimizer state is offloaded). Checks the segments.
  AdamW(std::int64_t numel, std::vector<DecaySegment> segments, AdamWOptions options,
        c10::Device device = c10::Device(c10::kCPU));

  // One update of `params` in place from `grad` with learning rate `lr` (the schedule's value for
  // this step). Both are contiguous 1-D fp32 tensors of numel() elements on device().
  void step(const at::Tensor& params, const at::Tensor& grad, double lr);

  std::int64_t numel() const { return numel_; }
  std::int64_t step_count() const { return step_; }
  c10::Device device() const { return device_; }
  const AdamWOptions& options() const { return options_; }
  const std::vector<DecaySegment>& segments() const { return segments_; }

  // The live state (tensors alias the optimizer's buffers: clone them to keep them past a step).
  AdamWState state() const;
  // Copies `state` in (from any device), after checking its dtype and shapes.
  void load_state(const AdamWState& state);
  // For a caller that filled the live state() tensors in place: the update count to continue from.
  void set_step_count(std::int64_t step);

  // The state as named tensors for a checkpoint file: "step" (0-dim int64), "exp_avg" and
  // "exp_avg_sq" (live fp32 [numel], see state()).
  std::map<std::string, at::Tensor> state_tensors() const;
  // The inverse of state_tensors(). `source` (a file name) prefixes every error message.
  void load_state_tensors(const std::map<std::string, at::Tensor>& tensors, const std::string& source);

 private:
  void check_buffer(const at::Tensor& t, const char* name) const;
  void step_fused_cpu(const at::Tensor& params, const at::Tensor& grad, double lr);
  void step_tensor_ops(const at::Tensor& params, const at::Tensor& grad, double lr);

  std::int64_t numel_;
  std::vector<DecaySegment> segments_;  // as given (checked)
  std::vector<DecaySegment> runs_;      // adjacent segments with the same flag merged, none empty
  AdamWOptions options_;
  c10::Device device_;
  std::int64_t step_ = 0;
  at::Tensor exp_avg_, exp_avg_sq_;
};

}  // namespace ft::optim

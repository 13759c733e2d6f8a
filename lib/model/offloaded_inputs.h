// The checkpointed layer inputs of one forward pass kept in pinned host memory
// (train.offload_activations), in layer order. Backward takes them back from the last layer down;
// taking layer i's input starts copying layer i-1's back on a side stream, so that the copy runs
// while layer i is recomputed and differentiated, as Unsloth's offloaded checkpointing and
// PyTorch FSDP's backward prefetch do. On the GPU at a time: the input in use and the one arriving.
#pragma once

#include <ATen/core/Tensor.h>
#include <c10/core/Event.h>
#include <c10/core/Stream.h>

#include <memory>
#include <optional>
#include <vector>

namespace ft::model {

// train.offload_activations and train.offload_prefetch.
struct InputOffload {
  bool enabled = false;
  bool prefetch = true;  // false: a slot comes back when taken, on the compute stream (one input less on the GPU)
};

class OffloadedInputs {
 public:
  explicit OffloadedInputs(bool prefetch) : prefetch_(prefetch) {}
  ~OffloadedInputs();
  OffloadedInputs(const OffloadedInputs&) = delete;
  OffloadedInputs& operator=(const OffloadedInputs&) = delete;
  // Forward: copies x (a GPU tensor) to pinned host memory on the current stream, without waiting
  // (anything that later reuses x's memory is ordered after the copy on that stream). Returns its slot.
  std::size_t put(const at::Tensor& x);
  // Backward: slot's input on its device again, ready for work on the current stream; then, with
  // prefetch, starts bringing back the slot before it. Each slot is taken once.
  at::Tensor take(std::size_t slot);

 private:
  struct Entry {
    at::Tensor host;                // the pinned copy, until taken
    at::Tensor arriving;            // the device copy started ahead, if any
    std::optional<c10::Event> ready;  // recorded on the copy stream after `arriving` is written
  };
  void start_copy_back(std::size_t slot);

  bool prefetch_;
  std::vector<Entry> entries_;
  c10::Device device_ = c10::kCPU;
  std::optional<c10::Stream> copy_stream_;
  std::optional<c10::Stream> compute_stream_;  // the stream the copies back were allocated for
};

// One OffloadedInputs per forward pass, for a layer runner: a new one whenever the layer index
// does not go up (the first layer of the next micro-batch or evaluation).
class OffloadSessions {
 public:
  explicit OffloadSessions(bool prefetch) : prefetch_(prefetch) {}
  std::shared_ptr<OffloadedInputs> for_layer(std::size_t index);

 private:
  bool prefetch_;
  std::shared_ptr<OffloadedInputs> current_;
  std::size_t last_index_ = 0;
};

}  // namespace ft::model

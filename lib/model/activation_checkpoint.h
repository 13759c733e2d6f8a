// Activation checkpointing: a decoder layer runs in forward without keeping its activations
// (only its input), and is run again in backward to get the gradients, trading one extra layer
// forward per layer for the activations of all layers but one. A custom autograd Function,
// because LibTorch's C++ API has none; RNG state is replayed so that dropout draws the same masks.
#pragma once

#include <functional>
#include <vector>

#include "model/llama_model.h"
#include "model/offloaded_inputs.h"

namespace ft::model {

// y = fn(x), recomputed in backward. `params` are the tensors fn reads that may need gradients
// (the function's other inputs must not require grad); their gradients reach their .grad
// through their own gradient accumulators, as in a plain backward, hooks included. The default
// CPU generator's state (and the CUDA one's when x is on CUDA) is saved before fn and restored
// around the recomputation, so random ops repeat exactly and the generator ends in backward
// where it would have been without checkpointing. Without grad mode, or when neither x nor any
// parameter requires grad, this is just fn(x).
// `offload` (train.offload_activations): x on a GPU waits for backward in pinned host memory
// (model/offloaded_inputs.h: copied asynchronously, brought back ahead of the recomputation);
// the GPU then holds only the inputs of the layers in flight. On the CPU x is host memory
// already: no copy.
using CheckpointFn = std::function<torch::Tensor(const torch::Tensor&)>;
torch::Tensor checkpoint(const CheckpointFn& fn, const torch::Tensor& x, const std::vector<torch::Tensor>& params,
                         std::shared_ptr<OffloadedInputs> offload = nullptr);

// checkpoint() of `layer(x, inputs...)` with the layer's parameters that require grad. With a KV
// cache (generation) the layer runs plainly: a recomputation would extend the cache twice.
torch::Tensor checkpointed_layer(DecoderLayer& layer, const torch::Tensor& x, const LayerInputs& inputs,
                                 std::shared_ptr<OffloadedInputs> offload = nullptr);

// A LayerRunner that checkpoints every decoder layer (ForwardOptions::layer_runner), keeping
// their inputs in host memory when `offload` is enabled (one OffloadedInputs per forward pass).
LayerRunner activation_checkpointing_runner(InputOffload offload = {});

}  // namespace ft::model

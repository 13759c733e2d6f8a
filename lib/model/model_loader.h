// Builds a LlamaForCausalLM from a Hugging Face folder (config.json + safetensors), checking
// every parameter against the file: a missing tensor, a shape that config.json does not imply,
// or a non-float dtype is an error naming the file and the tensor.
#pragma once

#include <c10/core/Device.h>
#include <c10/core/ScalarType.h>

#include <optional>
#include <string>

#include "io/weight_source.h"
#include "model/llama_model.h"

namespace ft::model {

struct LoadOptions {
  // Parameter dtype; default: config.json's torch_dtype, else the stored dtype.
  std::optional<c10::ScalarType> dtype;
  c10::Device device = c10::kCPU;
};

LlamaForCausalLM load_llama(const std::string& model_dir, const LoadOptions& options = {});

// True when matrix products in `dtype` run on `device` with this LibTorch (1.13 has no fp16
// matmul on CPU). Probed once per (dtype, device) with a tiny product.
bool compute_dtype_supported(c10::ScalarType dtype, c10::Device device);
// Throws ft::Error naming `what` (a flag or config key) when compute_dtype_supported is false.
void check_compute_dtype(c10::ScalarType dtype, c10::Device device, const std::string& what);

// Copies every parameter of `model` from `weights` (converted to the parameter's dtype).
void load_weights(LlamaForCausalLM& model, const io::WeightSource& weights);

}  // namespace ft::model

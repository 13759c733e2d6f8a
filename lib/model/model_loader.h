// Builds a LlamaForCausalLM from a Hugging Face folder (config.json + safetensors), checking
// every parameter against the file: a missing tensor, a shape that config.json does not imply,
// or a non-float dtype is an error naming the file and the tensor.
#pragma once

#include <c10/core/Device.h>
#include <c10/core/ScalarType.h>

#include <optional>
#include <string>
#include <vector>

#include "io/weight_source.h"
#include "model/llama_model.h"
#include "model/quantization.h"

namespace ft::model {

struct LoadOptions {
  // Parameter dtype; default: config.json's torch_dtype, else the stored dtype.
  std::optional<c10::ScalarType> dtype;
  c10::Device device = c10::kCPU;
  // int8/nf4: the decoder layers' projections are quantized as they are read, tensor by tensor,
  // so loading never holds more than the quantized model and about one layer in full.
  Quantization quantize = Quantization::kNone;
};

// What quantizing the base did, tensor by tensor.
struct QuantizationReport {
  struct Tensor {
    std::string name;
    std::int64_t dense_bytes = 0;      // in the compute dtype
    std::int64_t quantized_bytes = 0;
    RoundTripError error;              // dequantize(quantize(w)) against w as stored
  };
  Quantization quantization = Quantization::kNone;
  std::vector<Tensor> tensors;

  std::int64_t dense_bytes() const;      // summed over the tensors
  std::int64_t quantized_bytes() const;

  // "nf4: 280 tensors, 25.4 GB -> 3.57 GB; round-trip relative RMS error mean 0.0931, worst
  // 0.1012 (model.layers.3.mlp.down_proj.weight)"
  std::string summary() const;
};

// With `report` (and options.quantize set): fills it, measuring each tensor's round-trip error.
LlamaForCausalLM load_llama(const std::string& model_dir, const LoadOptions& options = {},
                            QuantizationReport* report = nullptr);

// True when matrix products in `dtype` run on `device` with this LibTorch (1.13 has no fp16
// matmul on CPU). Probed once per (dtype, device) with a tiny product.
bool compute_dtype_supported(c10::ScalarType dtype, c10::Device device);
// Throws ft::Error naming `what` (a flag or config key) when compute_dtype_supported is false.
void check_compute_dtype(c10::ScalarType dtype, c10::Device device, const std::string& what);

// Copies every parameter of `model` from `weights` (converted to the parameter's dtype) and
// quantizes the weights of quantized projections into their storage (filling `report` if given).
void load_weights(LlamaForCausalLM& model, const io::WeightSource& weights, QuantizationReport* report = nullptr);

}  // namespace ft::model

// Quantized storage for frozen base weights (model.quantize), so that LoRA over a 13B or 34B
// base fits a 24 GB card:
//   int8  one int8 per weight and an fp32 absmax scale per output channel (row):
//         w ≈ q · absmax_row / 127.
//   nf4   QLoRA's NormalFloat4 (Dettmers et al. 2023, as bitsandbytes stores it): the weight,
//         flattened row-major, in blocks of 64; each block scaled by its absmax into [-1, 1] and
//         every value replaced by the index of the nearest of 16 code values (quantiles of
//         N(0,1), nf4_code_book()), two indices per byte, the first in the high nibble.
//         Double quantization: the fp32 block absmaxes, minus their mean, are themselves
//         quantized in blocks of 256 to 8 bits with bitsandbytes' signed dynamic map
//         (dynamic_map_code()), one fp32 absmax per 256 blocks.
// tests/reference/make_quantization_reference.py derives both code books and quantizes a test
// tensor independently; tests/model/quantization_test.cpp checks this code against it.
#pragma once

#include <torch/nn/module.h>
#include <torch/nn/pimpl.h>

#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "config/choices.h"

namespace ft::model {

using Quantization = config::Quantization;  // model.quantize

// "none" | "int8" | "nf4"; anything else throws ft::Error naming `what` (a flag or key).
Quantization parse_quantization(const std::string& name, const std::string& what);
std::string quantization_name(Quantization q);

constexpr std::int64_t kNf4BlockSize = 64;
constexpr std::int64_t kNf4AbsmaxBlockSize = 256;

// The 16 NF4 values, ascending, from -1 to 1 with an exact 0 (index 7).
const std::array<float, 16>& nf4_code_book();
// bitsandbytes' create_dynamic_map(signed=True, max_exponent_bits=7, total_bits=8): 256
// ascending values in (-1, 1], used for the double-quantized absmaxes.
const std::array<float, 256>& dynamic_map_code();

// Bytes the quantized form of a [rows, cols] weight takes (what ft_plan and the loader count).
std::int64_t quantized_bytes(std::int64_t rows, std::int64_t cols, Quantization q);

// A weight matrix [rows, cols] in quantized form. Its tensors are buffers, so module.to(device)
// moves them, while module.to(dtype) leaves them alone (converting codes would destroy them).
//   int8: codes int8 [rows, cols], scale fp32 [rows] (absmax / 127)
//   nf4:  codes uint8 [ceil(rows·cols / 64) · 32], absmax_codes uint8 [blocks],
//         absmax_scale fp32 [ceil(blocks / 256)], absmax_offset fp32 [1]
class QuantizedWeightImpl : public torch::nn::Module {
 public:
  // Quantizes `weight` (any float dtype and device; kept on its device).
  QuantizedWeightImpl(const torch::Tensor& weight, Quantization q);
  // Storage for a [rows, cols] weight, uninitialized, to be filled by assign().
  QuantizedWeightImpl(std::int64_t rows, std::int64_t cols, Quantization q, const torch::Device& device);

  // Replaces the stored values by the quantized `weight` ([rows, cols], any float dtype).
  void assign(const torch::Tensor& weight);
  // The weight [rows, cols] in `dtype` (computed in fp32, then cast): a temporary copy. On the
  // CPU a fused loop; elsewhere dequantize_with_tensor_ops (tests check they agree bitwise).
  torch::Tensor dequantize(c10::ScalarType dtype) const;
  torch::Tensor dequantize_with_tensor_ops(c10::ScalarType dtype) const;

  Quantization quantization() const { return q_; }
  std::int64_t rows() const { return rows_; }
  std::int64_t cols() const { return cols_; }
  torch::Device device() const { return codes.device(); }
  std::int64_t bytes() const;

  void to(torch::Device device, torch::Dtype dtype, bool non_blocking = false) override;
  void to(torch::Dtype dtype, bool non_blocking = false) override;
  void to(torch::Device device, bool non_blocking = false) override;

  torch::Tensor codes, scale;                                   // int8 (scale) and nf4 (codes)
  torch::Tensor absmax_codes, absmax_scale, absmax_offset;      // nf4 only

 private:
  void allocate(const torch::Device& device);
  torch::Tensor block_absmax() const;  // nf4: the fp32 absmax of each block of 64, dequantized

  Quantization q_;
  std::int64_t rows_, cols_;
};
TORCH_MODULE(QuantizedWeight);

// How far dequantize(quantize(w)) is from w: the RMS of the difference relative to w's RMS,
// and the largest absolute difference.
struct RoundTripError {
  double relative_rms = 0;
  double max_abs = 0;
};
RoundTripError round_trip_error(const torch::Tensor& weight, const QuantizedWeightImpl& quantized);

}  // namespace ft::model

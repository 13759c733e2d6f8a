// y = x · Wᵀ for a frozen quantized W (model/quantization.h) without ever keeping W whole:
// forward dequantizes W into a temporary, multiplies and frees it; backward dequantizes it again
// to compute dL/dx = dL/dy · W. No gradient for W (the base is frozen). Plain autograd would
// save the dequantized W of every layer for backward, i.e. the whole unquantized model.
#pragma once

#include <torch/types.h>

#include "model/quantization.h"

namespace ft::model {

// x [..., cols] -> [..., rows] in x's dtype.
torch::Tensor quantized_linear(const torch::Tensor& x, const QuantizedWeight& weight);

}  // namespace ft::model

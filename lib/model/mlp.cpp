#include "model/mlp.h"

#include <torch/torch.h>

#include "model/fused_layer_ops.h"

namespace ft::model {

MlpImpl::MlpImpl(const io::LlamaConfig& c, const torch::TensorOptions& options, Quantization quantize) {
  gate_proj = register_module("gate_proj", Linear(c.hidden_size, c.intermediate_size, options, quantize));
  up_proj = register_module("up_proj", Linear(c.hidden_size, c.intermediate_size, options, quantize));
  down_proj = register_module("down_proj", Linear(c.intermediate_size, c.hidden_size, options, quantize));
}

torch::Tensor MlpImpl::forward(const torch::Tensor& x) {
  if (is_training()) return down_proj(fused_swiglu(gate_proj(x), up_proj(x)));  // fused_layer_ops.h
  return down_proj(torch::silu(gate_proj(x)) * up_proj(x));
}

}  // namespace ft::model

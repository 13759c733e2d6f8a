#include "model/mlp.h"

#include <torch/torch.h>

namespace ft::model {

MlpImpl::MlpImpl(const io::LlamaConfig& c, const torch::TensorOptions& options, Quantization quantize) {
  gate_proj = register_module("gate_proj", Linear(c.hidden_size, c.intermediate_size, options, quantize));
  up_proj = register_module("up_proj", Linear(c.hidden_size, c.intermediate_size, options, quantize));
  down_proj = register_module("down_proj", Linear(c.intermediate_size, c.hidden_size, options, quantize));
}

torch::Tensor MlpImpl::forward(const torch::Tensor& x) {
  // The fused SwiGLU; a LoRA branch on down_proj remakes the product in backward (linear.h).
  if (is_training()) return down_proj->forward_swiglu(gate_proj(x), up_proj(x));
  return down_proj(torch::silu(gate_proj(x)) * up_proj(x));
}

}  // namespace ft::model

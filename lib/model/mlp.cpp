#include "model/mlp.h"

#include <torch/torch.h>

namespace ft::model {

MlpImpl::MlpImpl(const io::LlamaConfig& c, const torch::TensorOptions& options, Quantization quantize) {
  gate_proj = register_module("gate_proj", Linear(c.hidden_size, c.intermediate_size, options, quantize));
  up_proj = register_module("up_proj", Linear(c.hidden_size, c.intermediate_size, options, quantize));
  down_proj = register_module("down_proj", Linear(c.intermediate_size, c.hidden_size, options, quantize));
}

torch::Tensor MlpImpl::forward(const torch::Tensor& x) {
  return down_proj(torch::silu(gate_proj(x)) * up_proj(x));
}

}  // namespace ft::model

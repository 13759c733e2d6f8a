#include "model/quantized_linear.h"

#include <torch/torch.h>

namespace ft::model {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

// Keeps the quantized weight (not a dequantized copy) alive from forward to backward.
struct WeightHolder : torch::CustomClassHolder {
  explicit WeightHolder(QuantizedWeight w) : weight(std::move(w)) {}
  QuantizedWeight weight;
};

struct QuantizedLinearFunction : torch::autograd::Function<QuantizedLinearFunction> {
  static torch::Tensor forward(AutogradContext* ctx, const torch::Tensor& x, c10::intrusive_ptr<WeightHolder> holder) {
    torch::Tensor y = torch::nn::functional::linear(x, holder->weight->dequantize(x.scalar_type()));
    ctx->saved_data["weight"] = c10::IValue::make_capsule(std::move(holder));
    ctx->saved_data["dtype"] = static_cast<std::int64_t>(x.scalar_type());
    return y;
  }

  // Gradient slots: x, then none for the weight (frozen, and not a tensor input).
  static variable_list backward(AutogradContext* ctx, variable_list grad_outputs) {
    variable_list result(2);
    if (!ctx->needs_input_grad(0)) return result;
    auto capsule = ctx->saved_data["weight"].toCapsule();
    const auto& weight = static_cast<WeightHolder*>(capsule.get())->weight;
    const auto dtype = static_cast<c10::ScalarType>(ctx->saved_data["dtype"].toInt());
    // dL/dx [..., cols] = dL/dy [..., rows] · W [rows, cols]
    result[0] = torch::matmul(grad_outputs[0].to(dtype), weight->dequantize(dtype));
    return result;
  }
};

}  // namespace

torch::Tensor quantized_linear(const torch::Tensor& x, const QuantizedWeight& weight) {
  if (!torch::GradMode::is_enabled() || !x.requires_grad())
    return torch::nn::functional::linear(x, weight->dequantize(x.scalar_type()));
  return QuantizedLinearFunction::apply(x, c10::make_intrusive<WeightHolder>(weight));
}

}  // namespace ft::model

#include "model/lora_branch.h"

#include "model/fused_layer_ops.h"

#include "util/error.h"

namespace ft::model {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

// `swiglu`: x is swiglu_values(gate, up) (the down projection's input); the branch keeps gate
// and up (detached: the same memory SwiGLU's backward keeps) and makes x again in backward.
struct SwigluSource {
  torch::Tensor gate, up;
};

struct LoraBranch : torch::autograd::Function<LoraBranch> {
  static torch::Tensor forward(AutogradContext* ctx, const torch::Tensor& x, const torch::Tensor& y,
                               const torch::Tensor& a, const torch::Tensor& b, double scale, const SwigluSource& swiglu) {
    const std::int64_t in = a.size(1), out = b.size(0), rows = x.numel() / in;
    const torch::Tensor h = x.to(a.scalar_type()).reshape({rows, in});  // freed after forward (unless x is fp32)
    const torch::Tensor ha = at::mm(h, a.t());
    // The scale folded into the second product (addmm's alpha), the base output added by it (beta).
    const torch::Tensor sum = at::addmm(y.to(ha.scalar_type()).reshape({rows, out}), ha, b.t(), 1, scale);
    const bool recompute = swiglu.gate.defined();
    if (recompute) {
      ctx->save_for_backward({swiglu.gate.detach(), swiglu.up.detach(), a, b, ha});
    } else {
      ctx->save_for_backward({x, a, b, ha});
    }
    ctx->saved_data["recompute"] = recompute;
    ctx->saved_data["x_shape"] = x.sizes().vec();
    ctx->saved_data["x_dtype"] = static_cast<int64_t>(x.scalar_type());
    ctx->saved_data["scale"] = scale;
    ctx->saved_data["y_dtype"] = static_cast<int64_t>(y.scalar_type());
    return sum.view(y.sizes()).to(x.scalar_type());
  }

  // Gradient slots: x, y, a, b, scale and swiglu (none).
  static variable_list backward(AutogradContext* ctx, variable_list grad_outputs) {
    const variable_list saved = ctx->get_saved_variables();
    const bool recompute = ctx->saved_data["recompute"].toBool();
    const std::size_t first = recompute ? 2 : 1;
    const torch::Tensor &a = saved[first], &b = saved[first + 1], &ha = saved[first + 2];
    const double scale = ctx->saved_data["scale"].toDouble();
    const auto y_dtype = static_cast<c10::ScalarType>(ctx->saved_data["y_dtype"].toInt());
    const auto x_dtype = static_cast<c10::ScalarType>(ctx->saved_data["x_dtype"].toInt());
    const std::vector<std::int64_t> x_shape = ctx->saved_data["x_shape"].toIntVector();
    const std::int64_t in = a.size(1), out = b.size(0), rows = ha.size(0);
    const torch::Tensor g = grad_outputs[0].to(ha.scalar_type()).reshape({rows, out});
    variable_list result(6);
    if (ctx->needs_input_grad(1)) result[1] = g.to(y_dtype).view(grad_outputs[0].sizes());
    const bool need_a = ctx->needs_input_grad(2), need_x = ctx->needs_input_grad(0);
    if (ctx->needs_input_grad(3)) result[3] = at::mm(g.t(), ha).mul_(scale);
    if (need_a || need_x) {
      const torch::Tensor g_ha = at::mm(g, b).mul_(scale);
      if (need_a) {
        const torch::Tensor x = recompute ? swiglu_values(saved[0], saved[1]) : saved[0];
        result[2] = at::mm(g_ha.t(), x.to(a.scalar_type()).reshape({rows, in}));
      }
      if (need_x) result[0] = at::mm(g_ha, a).to(x_dtype).view(x_shape);
    }
    return result;
  }
};

}  // namespace

torch::Tensor lora_branch(const torch::Tensor& x, const torch::Tensor& y, const torch::Tensor& a,
                          const torch::Tensor& b, double scale) {
  FT_ASSERT(a.dim() == 2 && b.dim() == 2 && a.size(0) == b.size(1) && x.size(-1) == a.size(1) &&
                y.size(-1) == b.size(0),
            "lora_branch: shapes x ", x.sizes(), ", y ", y.sizes(), ", A ", a.sizes(), ", B ", b.sizes());
  return LoraBranch::apply(x, y, a, b, scale, SwigluSource{});
}

torch::Tensor lora_branch_of_swiglu(const torch::Tensor& x, const torch::Tensor& gate, const torch::Tensor& up,
                                    const torch::Tensor& y, const torch::Tensor& a, const torch::Tensor& b,
                                    double scale) {
  FT_ASSERT(gate.sizes() == x.sizes() && up.sizes() == x.sizes(), "lora_branch_of_swiglu: x ", x.sizes(), ", gate ",
            gate.sizes(), ", up ", up.sizes());
  FT_ASSERT(a.dim() == 2 && b.dim() == 2 && a.size(0) == b.size(1) && x.size(-1) == a.size(1) &&
                y.size(-1) == b.size(0),
            "lora_branch_of_swiglu: shapes x ", x.sizes(), ", y ", y.sizes(), ", A ", a.sizes(), ", B ", b.sizes());
  return LoraBranch::apply(x, y, a, b, scale, SwigluSource{gate, up});
}

}  // namespace ft::model

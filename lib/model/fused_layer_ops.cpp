#include "model/fused_layer_ops.h"

#include <ATen/Parallel.h>
#include <ATen/record_function.h>
#include <torch/torch.h>

#include <algorithm>

#include "model/fused_cpu_loops.h"
#include "model/rotary_embedding.h"

namespace ft::model {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

// A custom function's forward is no ATen operator: this names it in a profile (bench/profile_step.py).
#define FT_PROFILED(name) RECORD_FUNCTION(name, std::vector<c10::IValue>())

bool cpu_fp32(const at::Tensor& t) { return t.device().is_cpu() && t.scalar_type() == at::kFloat; }

// Rows per task of the RMSNorm backward: each block sums its rows' weight gradient on its own,
// and the blocks are added in order, so the result does not depend on the number of threads.
constexpr std::int64_t kRowsPerBlock = 64;

struct RmsNormFunction : torch::autograd::Function<RmsNormFunction> {
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& x_in, const at::Tensor& weight, double eps) {
    FT_PROFILED("ft::fused_rms_norm");
    const std::int64_t n = x_in.size(-1);
    at::Tensor x, y, rstd;
    if (cpu_fp32(x_in) && cpu_fp32(weight)) {
      x = x_in.contiguous();
      const at::Tensor w = weight.contiguous();
      const std::int64_t rows = x.numel() / n;
      y = at::empty_like(x);
      rstd = at::empty({rows}, x.options());
      const float *xp = x.data_ptr<float>(), *wp = w.data_ptr<float>();
      float *yp = y.data_ptr<float>(), *rp = rstd.data_ptr<float>();
      at::parallel_for(0, rows, 16, [&](std::int64_t begin, std::int64_t end) {
        cpu::rms_norm_forward(xp + begin * n, wp, yp + begin * n, rp + begin, end - begin, n, static_cast<float>(eps));
      });
    } else {
      x = x_in;
      const at::Tensor h = x.to(at::kFloat);
      rstd = at::rsqrt(h.pow(2).mean(-1, /*keepdim=*/true) + eps);
      y = weight * (h * rstd).to(x.scalar_type());
    }
    ctx->save_for_backward({x, weight, rstd});
    return y;
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const variable_list saved = ctx->get_saved_variables();
    const at::Tensor &x = saved[0], &weight = saved[1], &rstd = saved[2];
    const bool need_x = ctx->needs_input_grad(0), need_w = ctx->needs_input_grad(1);
    const std::int64_t n = x.size(-1);
    at::Tensor dx, dw;
    if (cpu_fp32(x) && cpu_fp32(weight)) {
      const at::Tensor dy = grads[0].contiguous();
      const at::Tensor w = weight.contiguous();
      const std::int64_t rows = x.numel() / n;
      const std::int64_t blocks = (rows + kRowsPerBlock - 1) / kRowsPerBlock;
      if (need_x) dx = at::empty_like(x);
      const at::Tensor partial = need_w ? at::zeros({blocks, n}, x.options()) : at::Tensor();
      const float *dyp = dy.data_ptr<float>(), *xp = x.data_ptr<float>(), *wp = w.data_ptr<float>(),
                  *rp = rstd.data_ptr<float>();
      float* dxp = need_x ? dx.data_ptr<float>() : nullptr;
      float* pp = need_w ? partial.data_ptr<float>() : nullptr;
      at::parallel_for(0, blocks, 1, [&](std::int64_t begin, std::int64_t end) {
        for (std::int64_t b = begin; b < end; ++b) {
          const std::int64_t first = b * kRowsPerBlock, count = std::min(kRowsPerBlock, rows - first);
          cpu::rms_norm_backward(dyp + first * n, xp + first * n, wp, rp + first, dxp ? dxp + first * n : nullptr,
                                 pp ? pp + b * n : nullptr, count, n);
        }
      });
      if (need_w) {
        dw = partial[0].clone();
        for (std::int64_t b = 1; b < blocks; ++b) dw.add_(partial[b]);
        dw = dw.view(weight.sizes());
      }
    } else {
      // Formula in fp32: x̂ = x·rstd, dx = rstd·(dy·w - x̂·mean(dy·w·x̂)), dw = Σ dy·x̂ (x̂ in x's dtype, as
      // forward). In place where the tensor is our own: the fp32 temporaries of a backward are the
      // step's peak on top of what every layer keeps (dy may be the incoming gradient itself).
      at::Tensor h = x.to(at::kFloat) * rstd;
      const at::Tensor dy = grads[0].to(at::kFloat);
      if (need_w) dw = (dy * h.to(x.scalar_type()).to(at::kFloat)).reshape({-1, n}).sum(0).to(weight.scalar_type());
      if (need_x) {
        at::Tensor dyw = dy * weight.to(at::kFloat);
        const at::Tensor mean = (dyw * h).mean(-1, /*keepdim=*/true);
        dx = dyw.sub_(h.mul_(mean)).mul_(rstd).to(x.scalar_type());
      }
    }
    return {dx, dw, at::Tensor()};
  }
};

// SwiGLU's forward on gate and up as they are used (contiguous on the CPU in fp32).
at::Tensor swiglu_of(const at::Tensor& gate, const at::Tensor& up) {
  if (cpu_fp32(gate) && cpu_fp32(up) && gate.sizes() == up.sizes() && gate.is_contiguous() && up.is_contiguous()) {
    at::Tensor y = at::empty_like(gate);
    const float *gp = gate.data_ptr<float>(), *up_ = up.data_ptr<float>();
    float* yp = y.data_ptr<float>();
    at::parallel_for(0, gate.numel(), 1 << 14, [&](std::int64_t begin, std::int64_t end) {
      cpu::swiglu_forward(gp + begin, up_ + begin, yp + begin, end - begin);
    });
    return y;
  }
  return at::silu(gate) * up;
}

struct SwigluFunction : torch::autograd::Function<SwigluFunction> {
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& gate_in, const at::Tensor& up_in) {
    FT_PROFILED("ft::fused_swiglu");
    at::Tensor gate = gate_in, up = up_in;
    if (cpu_fp32(gate) && cpu_fp32(up) && gate.sizes() == up.sizes()) {
      gate = gate.contiguous();
      up = up.contiguous();
    }
    at::Tensor y = swiglu_of(gate, up);
    ctx->save_for_backward({gate, up});
    return y;
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const variable_list saved = ctx->get_saved_variables();
    const at::Tensor &gate = saved[0], &up = saved[1];
    at::Tensor dg, du;
    if (cpu_fp32(gate) && cpu_fp32(up) && gate.sizes() == up.sizes() && gate.is_contiguous() && up.is_contiguous()) {
      const at::Tensor dy = grads[0].contiguous();
      dg = at::empty_like(gate);
      du = at::empty_like(up);
      const float *dyp = dy.data_ptr<float>(), *gp = gate.data_ptr<float>(), *up_ = up.data_ptr<float>();
      float *dgp = dg.data_ptr<float>(), *dup = du.data_ptr<float>();
      at::parallel_for(0, gate.numel(), 1 << 14, [&](std::int64_t begin, std::int64_t end) {
        cpu::swiglu_backward(dyp + begin, gp + begin, up_ + begin, dgp + begin, dup + begin, end - begin);
      });
    } else {
      // The unfused chain's backward, operation for operation (mul's, then silu_backward's, which
      // computes in fp32 inside the kernel): the same values as eager autograd in every dtype, and
      // no fp32 copies of [tokens, intermediate] tensors alive at once.
      const at::Tensor& dy = grads[0];
      du = dy * at::silu(gate);
      dg = at::silu_backward(dy * up, gate);
    }
    return {dg, du};
  }
};

// cat(z2, -z1): the transpose of rotate_half.
at::Tensor rotate_half_transposed(const at::Tensor& z) {
  const std::int64_t half = z.size(-1) / 2;
  return at::cat({z.narrow(-1, half, half), -z.narrow(-1, 0, half)}, -1);
}

// out[b,t,h,:] = rotation of x[b,t,h,:] by the angles of (b,t); x's last dimension contiguous.
at::Tensor rotate_rows(const at::Tensor& x_in, const at::Tensor& cos, const at::Tensor& sin, bool inverse) {
  const at::Tensor x = x_in.stride(-1) == 1 ? x_in : x_in.contiguous();
  const std::int64_t b = x.size(0), t = x.size(1), heads = x.size(2), hd = x.size(3);
  at::Tensor out = at::empty({b, t, heads, hd}, x.options());
  const std::int64_t sb = x.stride(0), st = x.stride(1), sh = x.stride(2);
  const std::int64_t cb = cos.size(0) == 1 ? 0 : t * hd;
  const float *xp = x.data_ptr<float>(), *cp = cos.data_ptr<float>(), *sp = sin.data_ptr<float>();
  float* op = out.data_ptr<float>();
  at::parallel_for(0, b * t, 4, [&](std::int64_t begin, std::int64_t end) {
    for (std::int64_t bt = begin; bt < end; ++bt) {
      const std::int64_t bi = bt / t, ti = bt % t;
      const float* c = cp + bi * cb + ti * hd;
      const float* s = sp + bi * cb + ti * hd;
      for (std::int64_t h = 0; h < heads; ++h)
        cpu::rotary_row(xp + bi * sb + ti * st + h * sh, c, s, op + (bt * heads + h) * hd, hd, inverse);
    }
  });
  return out;
}

struct RotaryFunction : torch::autograd::Function<RotaryFunction> {
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& x, const at::Tensor& cos_in,
                            const at::Tensor& sin_in) {
    FT_PROFILED("ft::fused_rotary");
    const at::Tensor cos = cos_in.contiguous(), sin = sin_in.contiguous();
    ctx->save_for_backward({cos, sin});
    if (cpu_fp32(x) && cpu_fp32(cos) && cpu_fp32(sin)) return rotate_rows(x, cos, sin, false);
    const at::Tensor c = cos.unsqueeze(2), s = sin.unsqueeze(2);  // broadcast over heads
    return x * c + rotate_half(x) * s;
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const variable_list saved = ctx->get_saved_variables();
    const at::Tensor &cos = saved[0], &sin = saved[1];
    const at::Tensor& dy = grads[0];
    at::Tensor dx;
    if (cpu_fp32(dy) && cpu_fp32(cos) && cpu_fp32(sin)) {
      dx = rotate_rows(dy, cos, sin, true);
    } else {
      const at::Tensor c = cos.unsqueeze(2), s = sin.unsqueeze(2);
      dx = dy * c + rotate_half_transposed(dy * s);
    }
    return {dx, at::Tensor(), at::Tensor()};
  }
};

// Whether the raw loops take these scores and bias: fp32 on the CPU, the bias one row of S per
// query for every head (make_attention_bias' shape).
bool softmax_loops_apply(const at::Tensor& scores, const at::Tensor& bias) {
  return cpu_fp32(scores) && cpu_fp32(bias) && scores.dim() == 4 && bias.dim() == 4 &&
         (bias.size(0) == 1 || bias.size(0) == scores.size(0)) && bias.size(1) == 1 &&
         bias.size(2) == scores.size(2) && bias.size(3) == scores.size(3);
}

struct AttentionSoftmaxFunction : torch::autograd::Function<AttentionSoftmaxFunction> {
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& scores_in, const at::Tensor& bias_in,
                            double scale) {
    FT_PROFILED("ft::fused_attention_softmax");
    ctx->saved_data["scale"] = scale;
    if (softmax_loops_apply(scores_in, bias_in)) {
      const at::Tensor scores = scores_in.contiguous(), bias = bias_in.contiguous();
      const std::int64_t batch = scores.size(0), heads = scores.size(1), t = scores.size(2), s = scores.size(3);
      const std::int64_t bias_batch_stride = bias.size(0) == 1 ? 0 : t * s;
      at::Tensor probs = at::empty_like(scores);
      const float *sp = scores.data_ptr<float>(), *bp = bias.data_ptr<float>();
      float* pp = probs.data_ptr<float>();
      at::parallel_for(0, batch * heads * t, 16, [&](std::int64_t begin, std::int64_t end) {
        for (std::int64_t row = begin; row < end; ++row) {
          const std::int64_t b = row / (heads * t), q = row % t;
          cpu::attention_softmax_row(sp + row * s, bp + b * bias_batch_stride + q * s, pp + row * s, s,
                                     static_cast<float>(scale));
        }
      });
      ctx->save_for_backward({probs});
      return probs;
    }
    // The unfused chain's operations (eager_attention in model/attention.cpp): the scale in the
    // scores' dtype, the bias and the softmax in fp32. One statement each, so that no temporary
    // [B,H,T,S] tensor outlives its use (the same values as the unfused expression).
    at::Tensor x = (scores_in * scale).to(at::kFloat);
    x.add_(bias_in);
    const at::Tensor probs32 = at::_softmax(x, -1, false);
    x = at::Tensor();
    ctx->save_for_backward({probs32});
    return probs32.to(scores_in.scalar_type());
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const at::Tensor probs = ctx->get_saved_variables()[0];
    const double scale = ctx->saved_data["scale"].toDouble();
    const at::Tensor& dp = grads[0];
    at::Tensor ds;
    if (cpu_fp32(dp) && probs.is_contiguous()) {
      const at::Tensor dpc = dp.contiguous();
      const std::int64_t s = probs.size(-1), rows = probs.numel() / s;
      ds = at::empty_like(probs);
      const float *pp = probs.data_ptr<float>(), *dpp = dpc.data_ptr<float>();
      float* dsp = ds.data_ptr<float>();
      at::parallel_for(0, rows, 16, [&](std::int64_t begin, std::int64_t end) {
        for (std::int64_t row = begin; row < end; ++row)
          cpu::attention_softmax_backward_row(pp + row * s, dpp + row * s, dsp + row * s, s, static_cast<float>(scale));
      });
    } else {
      // The unfused backward, operation for operation: softmax's in fp32, then the scale's in the
      // scores' dtype (the dtype of the incoming gradient); each fp32 temporary freed once used.
      // (Out of place: LibTorch 2's in-place multiplication of bf16 by a scalar rounds differently.)
      at::Tensor ds32 = at::_softmax_backward_data(dp.to(at::kFloat), probs, -1, at::kFloat);
      const at::Tensor unscaled = ds32.to(dp.scalar_type());
      ds32 = at::Tensor();
      ds = unscaled * scale;
    }
    return {ds, at::Tensor(), at::Tensor()};
  }
};

}  // namespace

at::Tensor fused_attention_softmax(const at::Tensor& scores, const at::Tensor& bias, double scale) {
  return AttentionSoftmaxFunction::apply(scores, bias, scale);
}

at::Tensor fused_rms_norm(const at::Tensor& x, const at::Tensor& weight, double eps) {
  return RmsNormFunction::apply(x, weight, eps);
}

at::Tensor fused_swiglu(const at::Tensor& gate, const at::Tensor& up) { return SwigluFunction::apply(gate, up); }

at::Tensor swiglu_values(const at::Tensor& gate, const at::Tensor& up) {
  const torch::NoGradGuard no_grad;
  const bool fused = cpu_fp32(gate) && cpu_fp32(up) && gate.sizes() == up.sizes();
  return swiglu_of(fused ? gate.contiguous() : gate, fused ? up.contiguous() : up);
}

at::Tensor fused_rotary(const at::Tensor& x, const at::Tensor& cos, const at::Tensor& sin) {
  return RotaryFunction::apply(x, cos, sin);
}

}  // namespace ft::model

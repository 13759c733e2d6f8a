#include "model/causal_lm_loss.h"

#include <ATen/Parallel.h>
#include <ATen/record_function.h>
#include <torch/torch.h>

#include <algorithm>
#include <limits>

#include "model/fused_cpu_loops.h"
#include "model/llama_model.h"
#include "util/error.h"

namespace ft::model {

double LossSum::mean() const {
  return tokens > 0 ? sum.item<double>() / static_cast<double>(tokens) : std::numeric_limits<double>::quiet_NaN();
}

LossSum causal_lm_loss(const at::Tensor& logits, const at::Tensor& labels) {
  FT_CHECK(logits.dim() == 3 && labels.dim() == 2 && logits.size(0) == labels.size(0) &&
               logits.size(1) == labels.size(1),
           "causal_lm_loss: logits ", logits.sizes(), " do not match labels ", labels.sizes());
  const std::int64_t v = logits.size(2);
  auto shifted_logits = logits.narrow(1, 0, logits.size(1) - 1).reshape({-1, v}).to(torch::kFloat);
  auto shifted_labels = labels.narrow(1, 1, labels.size(1) - 1).reshape({-1}).to(logits.device());
  LossSum out;
  out.sum = torch::nn::functional::cross_entropy(
      shifted_logits, shifted_labels,
      torch::nn::functional::CrossEntropyFuncOptions().ignore_index(kIgnoreIndex).reduction(torch::kSum));
  out.tokens = (shifted_labels != kIgnoreIndex).sum().item<std::int64_t>();
  return out;
}

namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

// fp32 logits [n,V] of the rows `h` [n,H]: the product in the weight's dtype, as linear() gives
// the unchunked path, then converted (the same tensor when already fp32).
at::Tensor chunk_logits(const at::Tensor& h, const at::Tensor& weight) {
  return at::mm(h, weight.t()).to(at::kFloat);
}

// Each row's log-sum-exp of the fp32 logits x [rows,V] into lse [rows] (max + log(sum(exp(x -
// max))), as log_softmax), and with `gradient` x turned in place into softmax - one_hot(target):
// the gradient of the rows' summed loss with respect to their logits. No second [rows,V] buffer.
// On the CPU one raw loop per row (model/fused_cpu_loops.h); elsewhere ATen's operations.
// The targets are in [0, V): the caller's gather of the target logits checked them.
void log_sum_exp(at::Tensor& x, at::Tensor& lse, const at::Tensor& targets, bool gradient) {
  if (x.device().is_cpu() && x.is_contiguous() && lse.is_contiguous()) {
    const at::Tensor t = targets.contiguous();
    const std::int64_t v = x.size(1);
    float *xp = x.data_ptr<float>(), *lp = lse.data_ptr<float>();
    const std::int64_t* tp = t.data_ptr<std::int64_t>();
    at::parallel_for(0, x.size(0), 4, [&](std::int64_t begin, std::int64_t end) {
      for (std::int64_t row = begin; row < end; ++row) lp[row] = cpu::log_sum_exp_row(xp + row * v, v, tp[row], gradient);
    });
    return;
  }
  const at::Tensor row_max = at::amax(x, {1}, /*keepdim=*/true);
  x.sub_(row_max).exp_();
  const at::Tensor sum_exp = x.sum(1);
  at::log_out(lse, sum_exp);
  lse.add_(row_max.squeeze(1));
  if (!gradient) return;
  x.mul_(sum_exp.reciprocal().unsqueeze(1));
  const at::Tensor index = targets.unsqueeze(1);
  x.scatter_(1, index, x.gather(1, index) - 1);
}

// The head's gradient, chunk by chunk: the first chunk writes it (no pass to zero a [V,H] buffer
// first; the same bits, since 0 + x == x), later chunks add to it.
void accumulate_head_grad(at::Tensor& grad_w, const at::Tensor& dx, const at::Tensor& hc, bool first) {
  if (first) {
    at::mm_out(grad_w, dx.t(), hc);
  } else {
    grad_w.addmm_(dx.t(), hc);
  }
}

// Sum over rows of -log softmax(x)[target], x = h · weightᵀ, chunk by chunk (see the header).
// With `grads_in_forward` (fp32 and bf16) forward also turns each chunk's logits into the chunk's
// share of the gradients of h and weight, as long as it holds them: no second product with the
// head in backward (eager PyTorch's full-logits loss makes none either), and backward only
// multiplies by the incoming gradient (a scalar: the loss is the last operation). fp16 keeps the
// gradients for backward, where the incoming gradient (the loss scale) lifts them out of fp16's
// underflow before they are rounded to it.
struct ChunkedHeadLoss : torch::autograd::Function<ChunkedHeadLoss> {
  // h [N,H] and weight [V,H] in one dtype; targets [N] int64 in [0, V). need_h / need_w: which
  // gradients to make in forward (grads_in_forward only).
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& h, const at::Tensor& weight,
                            const at::Tensor& targets, std::int64_t chunk, bool grads_in_forward, bool need_h,
                            bool need_w) {
    RECORD_FUNCTION("ft::chunked_head_loss", std::vector<c10::IValue>());  // named in profiles
    const std::int64_t n = h.size(0);
    at::Tensor lse = at::empty({n}, h.options().dtype(at::kFloat));
    at::Tensor losses = at::empty({n}, h.options().dtype(at::kFloat));
    at::Tensor grad_h = grads_in_forward && need_h ? at::empty_like(h) : at::Tensor();
    at::Tensor grad_w = grads_in_forward && need_w ? at::empty_like(weight) : at::Tensor();
    for (std::int64_t start = 0; start < n; start += chunk) {
      const std::int64_t rows = std::min(chunk, n - start);
      const at::Tensor hc = h.narrow(0, start, rows);
      const at::Tensor chunk_targets = targets.narrow(0, start, rows);
      at::Tensor x = chunk_logits(hc, weight);
      const at::Tensor target_logit = x.gather(1, chunk_targets.unsqueeze(1)).squeeze(1);
      at::Tensor l = lse.narrow(0, start, rows);
      const bool gradients = grad_h.defined() || grad_w.defined();
      log_sum_exp(x, l, chunk_targets, gradients);
      at::Tensor row_losses = losses.narrow(0, start, rows);
      at::sub_out(row_losses, l, target_logit);
      if (gradients) {
        const at::Tensor dx = x.to(weight.scalar_type());
        x = at::Tensor();
        if (grad_h.defined()) {
          at::Tensor out = grad_h.narrow(0, start, rows);
          at::mm_out(out, dx, weight);
        }
        if (grad_w.defined()) accumulate_head_grad(grad_w, dx, hc, start == 0);
      }
    }
    if (grad_w.defined() && n == 0) grad_w.zero_();
    if (grads_in_forward) {
      ctx->save_for_backward({grad_h, grad_w});
    } else {
      ctx->save_for_backward({h, weight, targets, lse});
    }
    ctx->saved_data["chunk"] = chunk;
    ctx->saved_data["grads_in_forward"] = grads_in_forward;
    return losses.sum();  // one sum over all rows, as cross_entropy's reduction
  }

  static variable_list backward(AutogradContext* ctx, variable_list grad_outputs) {
    const variable_list saved = ctx->get_saved_variables();
    const at::Tensor g = grad_outputs[0].to(at::kFloat);
    if (ctx->saved_data["grads_in_forward"].toBool()) {
      const at::Tensor &grad_h = saved[0], &grad_w = saved[1];
      auto scaled = [&](const at::Tensor& t) { return t.defined() ? (t * g).to(t.scalar_type()) : at::Tensor(); };
      return {scaled(grad_h), scaled(grad_w), at::Tensor(), at::Tensor(), at::Tensor(), at::Tensor(), at::Tensor()};
    }
    const at::Tensor &h = saved[0], &weight = saved[1], &targets = saved[2], &lse = saved[3];
    const std::int64_t chunk = ctx->saved_data["chunk"].toInt();
    const bool need_h = ctx->needs_input_grad(0), need_w = ctx->needs_input_grad(1);
    at::Tensor grad_h = need_h ? at::empty_like(h) : at::Tensor();
    at::Tensor grad_w = need_w ? at::empty_like(weight) : at::Tensor();
    const std::int64_t n = h.size(0);
    if (grad_w.defined() && n == 0) grad_w.zero_();
    if (need_h || need_w)
      for (std::int64_t start = 0; start < n; start += chunk) {
        const std::int64_t rows = std::min(chunk, n - start);
        const at::Tensor hc = h.narrow(0, start, rows);
        at::Tensor x = chunk_logits(hc, weight);
        // d loss / d logits = g · (softmax - one_hot(target)), in fp32, then in the weight's dtype
        // (what the unchunked path's backward of .to(kFloat) hands to linear's backward).
        x.sub_(lse.narrow(0, start, rows).unsqueeze(1)).exp_();
        const at::Tensor index = targets.narrow(0, start, rows).unsqueeze(1);
        x.scatter_(1, index, x.gather(1, index) - 1);
        x.mul_(g);
        const at::Tensor dx = x.to(weight.scalar_type());
        x = at::Tensor();
        if (need_h) {
          at::Tensor out = grad_h.narrow(0, start, rows);
          at::mm_out(out, dx, weight);
        }
        if (need_w) accumulate_head_grad(grad_w, dx, hc, start == 0);
      }
    return {grad_h, grad_w, at::Tensor(), at::Tensor(), at::Tensor(), at::Tensor(), at::Tensor()};
  }
};

}  // namespace

LossSum chunked_causal_lm_loss(const at::Tensor& hidden, const at::Tensor& weight, const at::Tensor& labels,
                               std::int64_t chunk_tokens) {
  FT_CHECK(chunk_tokens > 0, "chunked_causal_lm_loss: chunk_tokens must be positive, got ", chunk_tokens);
  FT_CHECK(hidden.dim() == 3 && labels.dim() == 2 && hidden.size(0) == labels.size(0) &&
               hidden.size(1) == labels.size(1) && weight.dim() == 2 && weight.size(1) == hidden.size(2),
           "chunked_causal_lm_loss: hidden ", hidden.sizes(), ", weight ", weight.sizes(), " and labels ",
           labels.sizes(), " do not match");
  const std::int64_t b = hidden.size(0), t = hidden.size(1);
  // Position (row, p) predicts labels[row, p + 1]: select the positions whose next label is a
  // target, as indices into the flattened [B·T] positions (the last position of a row never is).
  const at::Tensor flat_labels = labels.to(hidden.device()).reshape({-1});
  at::Tensor is_target = at::zeros({b, t}, flat_labels.options().dtype(at::kBool));
  if (t > 1) is_target.narrow(1, 0, t - 1).copy_(labels.narrow(1, 1, t - 1).to(hidden.device()) != kIgnoreIndex);
  const at::Tensor index = is_target.reshape({-1}).nonzero().reshape({-1});
  const at::Tensor rows = hidden.reshape({b * t, hidden.size(2)}).index_select(0, index);
  const at::Tensor targets = flat_labels.index_select(0, index + 1);
  LossSum out;
  out.tokens = index.size(0);
  // Gradients are made in forward only when autograd will ask for them (not in evaluation).
  const bool need_h = torch::GradMode::is_enabled() && rows.requires_grad();
  const bool need_w = torch::GradMode::is_enabled() && weight.requires_grad();
  const bool grads_in_forward = (need_h || need_w) && weight.scalar_type() != at::kHalf;
  out.sum = ChunkedHeadLoss::apply(rows, weight, targets, chunk_tokens, grads_in_forward, need_h, need_w);
  return out;
}

LossSum model_loss(LlamaForCausalLM& model, const at::Tensor& ids, const at::Tensor& labels,
                   const ForwardOptions& options, std::int64_t chunk_tokens) {
  if (chunk_tokens <= 0) return causal_lm_loss(model(ids, options), labels);
  return chunked_causal_lm_loss(model->model(ids, options), model->output_weight(), labels, chunk_tokens);
}

std::int64_t count_target_tokens(const at::Tensor& labels) {
  return (labels.narrow(1, 1, labels.size(1) - 1) != kIgnoreIndex).sum().item<std::int64_t>();
}

}  // namespace ft::model

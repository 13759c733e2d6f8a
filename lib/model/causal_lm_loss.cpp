#include "model/causal_lm_loss.h"

#include <torch/torch.h>

#include <limits>

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

std::int64_t count_target_tokens(const at::Tensor& labels) {
  return (labels.narrow(1, 1, labels.size(1) - 1) != kIgnoreIndex).sum().item<std::int64_t>();
}

}  // namespace ft::model

// Next-token cross-entropy as HF's causal-LM loss: position t predicts labels[t + 1]; labels
// equal to -100 (prompt tokens, padding, sample starts in a pack) contribute nothing. The sum
// and the count are returned separately so that the trainer can normalize by the number of
// target tokens of a whole optimizer step (all micro-batches, all ranks), not per micro-batch.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>

namespace ft::model {

constexpr std::int64_t kIgnoreIndex = -100;

struct LossSum {
  at::Tensor sum;          // 0-d fp32, differentiable
  std::int64_t tokens = 0;  // target tokens that contributed
  double mean() const;     // sum / tokens (NaN when there are none)
};

// logits [B,T,V] (any float dtype; the loss is computed in fp32), labels [B,T] int64.
LossSum causal_lm_loss(const at::Tensor& logits, const at::Tensor& labels);

// Number of target tokens, i.e. labels[:, 1:] != -100.
std::int64_t count_target_tokens(const at::Tensor& labels);

}  // namespace ft::model

// Next-token cross-entropy as HF's causal-LM loss: position t predicts labels[t + 1]; labels
// equal to -100 (prompt tokens, padding, sample starts in a pack) contribute nothing. The sum
// and the count are returned separately so that the trainer can normalize by the number of
// target tokens of a whole optimizer step (all micro-batches, all ranks), not per micro-batch.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>

namespace ft::model {

constexpr std::int64_t kIgnoreIndex = -100;

class LlamaForCausalLM;
struct ForwardOptions;

struct LossSum {
  at::Tensor sum;          // 0-d fp32, differentiable
  std::int64_t tokens = 0;  // target tokens that contributed
  double mean() const;     // sum / tokens (NaN when there are none)
};

// logits [B,T,V] (any float dtype; the loss is computed in fp32), labels [B,T] int64.
LossSum causal_lm_loss(const at::Tensor& logits, const at::Tensor& labels);

// The same loss computed from the final hidden states [B,T,H] and the output projection `weight`
// [V,H] (lm_head.weight, or the embedding table when tied), without ever holding logits for the
// whole sequence ("cut cross-entropy"): only positions whose shifted label is not -100 are
// selected (prompt tokens cost nothing), and their logits are computed `chunk_tokens` rows at a
// time (in weight's dtype, then fp32 for the log-softmax), keeping per row only its log-sum-exp.
// In training (fp32, bf16) forward also turns each chunk's logits into that chunk's share of the
// gradients of the hidden states and (when it requires grad: full fine-tune, tied embedding) of
// `weight`, and backward only scales them by the incoming gradient: the head's product is made
// once per chunk, as eager PyTorch's full-logits loss makes it. In fp16 backward computes each
// chunk's logits again (the loss scale must reach the gradients before they are rounded to fp16).
// A step's extra memory is one chunk's logits (chunk_tokens x V x (4 + dtype bytes)), not the
// sequence's. The loss and the gradients equal causal_lm_loss(linear(hidden, weight), labels)'s up to the
// rounding of summing in another order. `weight` gets a gradient (zeros) even when no label is
// a target, as in the unchunked path, so gradient hooks fire alike. chunk_tokens > 0.
LossSum chunked_causal_lm_loss(const at::Tensor& hidden, const at::Tensor& weight, const at::Tensor& labels,
                               std::int64_t chunk_tokens);

// The loss of `model` on ids [B,T] against labels [B,T], as training and evaluation compute it
// (train.loss_chunk_tokens): chunk_tokens > 0 runs the decoder and then chunked_causal_lm_loss
// with the model's output projection; 0 takes the full logits of model(ids) to causal_lm_loss.
LossSum model_loss(LlamaForCausalLM& model, const at::Tensor& ids, const at::Tensor& labels,
                   const ForwardOptions& options, std::int64_t chunk_tokens);

// Number of target tokens, i.e. labels[:, 1:] != -100.
std::int64_t count_target_tokens(const at::Tensor& labels);

}  // namespace ft::model

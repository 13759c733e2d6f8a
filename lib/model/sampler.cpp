#include "model/sampler.h"

#include <torch/torch.h>

#include <limits>

#include "util/error.h"

namespace ft::model {

void validate(const SamplingOptions& o) {
  FT_CHECK(o.temperature >= 0, "--temperature: expected a number >= 0, got ", o.temperature);
  FT_CHECK(o.top_k >= 0, "--top-k: expected an integer >= 0, got ", o.top_k);
  FT_CHECK(o.top_p > 0 && o.top_p <= 1, "--top-p: expected a number in (0, 1], got ", o.top_p);
}

at::Tensor filter_logits(const at::Tensor& logits, const SamplingOptions& o) {
  const float neg_inf = -std::numeric_limits<float>::infinity();
  auto scores = logits.to(torch::kFloat).flatten() / o.temperature;
  const std::int64_t v = scores.size(0);
  if (o.top_k > 0 && o.top_k < v) {
    auto kth = std::get<0>(torch::topk(scores, o.top_k)).min();
    scores = scores.masked_fill(scores < kth, neg_inf);
  }
  if (o.top_p < 1.0) {
    // HF TopPLogitsWarper: sort ascending, drop the tokens whose cumulative probability stays
    // within 1 - top_p, always keeping the most likely one.
    auto [sorted, order] = torch::sort(scores, /*dim=*/0, /*descending=*/false);
    auto cumulative = torch::softmax(sorted, 0).cumsum(0);
    auto remove_sorted = cumulative <= (1.0 - o.top_p);
    remove_sorted[v - 1] = false;
    auto remove = torch::zeros_like(remove_sorted).scatter(0, order, remove_sorted);
    scores = scores.masked_fill(remove, neg_inf);
  }
  return scores;
}

std::int64_t sample_next_token(const at::Tensor& logits, const SamplingOptions& o, at::Generator& generator) {
  if (o.temperature == 0) return logits.flatten().argmax().item<std::int64_t>();
  auto probs = torch::softmax(filter_logits(logits, o), 0);
  return torch::multinomial(probs, 1, /*replacement=*/false, generator).item<std::int64_t>();
}

}  // namespace ft::model

// Picks the next token from a logits vector: greedy at temperature 0, otherwise temperature,
// then top-k, then top-p (nucleus) filtering in the order HF's generation applies its warpers,
// then a draw from a seeded generator (the same seed gives the same text).
#pragma once

#include <ATen/core/Generator.h>
#include <ATen/core/Tensor.h>

#include <cstdint>

namespace ft::model {

struct SamplingOptions {
  double temperature = 1.0;  // 0 = greedy
  std::int64_t top_k = 0;    // 0 = off
  double top_p = 1.0;        // 1 = off
};

void validate(const SamplingOptions& options);  // throws ft::Error naming the flag

// logits [V] (any float dtype) -> token id.
std::int64_t sample_next_token(const at::Tensor& logits, const SamplingOptions& options, at::Generator& generator);

// The filtered, temperature-scaled logits (fp32, -inf where removed); exposed for tests.
at::Tensor filter_logits(const at::Tensor& logits, const SamplingOptions& options);

}  // namespace ft::model
